package nicfw

import (
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The receive pool (GRIM's optimistic flow control): a pooled bulk message
// (RemoteOffset endpoint.PoolOffset) names no place in its receiver; the
// receiving engine finds a block for it in the receiving endpoint's pool
// (endpoint.View.SetPool) when the message's first chunk arrives, and
// refuses the chunk (NACK: the sender's transport sends it again after
// its back-off) while no block is free. Nothing is reserved per sender:
// every sender shares the pool, and memory grows with the traffic in
// flight, not with the number of peers. A block is the application's from
// the moment its message's descriptor is put until the application
// releases that receive queue entry; the engine takes it back when it
// next needs room (reclaim). A message larger than the pool is returned
// (ReasonTooLarge); one for an endpoint without a pool, with ReasonRange.

// A pool is shared, so one sender must not be able to keep it: a sending
// host may hold at most half of it in blocks of messages still arriving
// while another host waits for a block (its chunk was refused since it
// last got one; PoolShare counts the refusals), and a block whose message
// makes no progress for EngineConfig.PoolHold while others wait is taken
// back (PoolExpired): a stream that published its first bytes and stopped
// cannot hold the pool. The sweep that finds such blocks runs when an
// allocation fails, at most once per PoolHold: a block is taken back when
// its message stored nothing between two sweeps. Its message is returned
// to its sender (ReasonIncomplete) when its next chunk comes.

// poolPage is the pool's unit of allocation: a block is whole pages.
const poolPage = 1024

// rxPool is the engine's allocator of one endpoint's receive pool.
type rxPool struct {
	off, size uint32      // the pool, as the application set it
	used      []bool      // per page
	inUse     int         // blocks allocated
	held      []poolBlock // blocks of messages put and not yet released
	// partial: pages of blocks of messages still arriving, per sending
	// host; waiting: the hosts refused a block since they last got one;
	// swept: when the pool was last swept for stale blocks.
	partial map[HostID]int
	waiting map[HostID]bool
	swept   time.Time
}

// poolBlock is a block of the pool: pages from first, and for a message
// put, the receive queue and position of its descriptor.
type poolBlock struct {
	first, pages uint32
	q            endpoint.Queue
	pos          uint32
}

// poolAlloc finds a block for rx, a pooled bulk message of length bytes
// from host src for endpoint s: ok false when none is free now (refuse the
// chunk for now); a reason when the message can never be stored.
func (e *Engine) poolAlloc(s *epState, rx *bulkRx, length uint32, src HostID) (ok bool, reason endpoint.Reason) {
	off, size := s.mem.Pool()
	p := s.pool
	if p == nil || p.inUse == 0 && len(p.held) == 0 && (p.off != off || p.size != size) {
		p = &rxPool{off: off, size: size, used: make([]bool, size/poolPage), partial: map[HostID]int{}, waiting: map[HostID]bool{}}
		s.pool = p
	}
	pages := (uint64(length) + poolPage - 1) / poolPage
	switch {
	case len(p.used) == 0:
		return false, endpoint.ReasonRange
	case pages > uint64(len(p.used)):
		return false, endpoint.ReasonTooLarge
	}
	if p.othersWait(src) && p.partial[src] > 0 && uint64(p.partial[src])+pages > uint64(len(p.used))/2 {
		e.stats.PoolShare++
		return false, 0 // its share, while others wait
	}
	first, found := p.find(int(pages))
	if !found {
		p.reclaim(s.mem)
		if first, found = p.find(int(pages)); !found {
			e.sweepPool(s)
			if first, found = p.find(int(pages)); !found {
				p.waiting[src] = true
				return false, 0
			}
		}
	}
	for i := range int(pages) {
		p.used[first+i] = true
	}
	p.inUse++
	p.partial[src] += int(pages)
	delete(p.waiting, src)
	rx.pooled, rx.block, rx.src, rx.swept = true, poolBlock{first: uint32(first), pages: uint32(pages)}, src, 0
	return true, 0
}

// othersWait reports whether a host other than src waits for a block.
func (p *rxPool) othersWait(src HostID) bool {
	for h := range p.waiting {
		if h != src {
			return true
		}
	}
	return false
}

// arrived notes that rx's message is whole: its block is the
// application's now, no longer its sender's share.
func (p *rxPool) arrived(rx *bulkRx) {
	if p.partial[rx.src] -= int(rx.block.pages); p.partial[rx.src] <= 0 {
		delete(p.partial, rx.src)
	}
}

// sweepPool takes back the blocks of s's pool whose messages stored
// nothing since the last sweep, if that was at least PoolHold ago, and
// notes what every other message has stored.
func (e *Engine) sweepPool(s *epState) {
	p, now := s.pool, e.clk.Now()
	if now.Sub(p.swept) < e.cfg.PoolHold {
		return
	}
	first := p.swept.IsZero()
	p.swept = now
	clear(p.waiting) // those still waiting say so again with their next chunk
	for _, list := range e.bulkRx {
		for _, rx := range list {
			if rx.dst != s || !rx.pooled || rx.put {
				continue
			}
			if !first && rx.got == rx.swept {
				poolDrop(rx)
				rx.expired = true
				e.stats.PoolExpired++
				continue
			}
			rx.swept = rx.got
		}
	}
}

// find returns the first run of n free pages.
func (p *rxPool) find(n int) (first int, ok bool) {
	run := 0
	for i, u := range p.used {
		if u {
			run = 0
			continue
		}
		if run++; run == n {
			return i - n + 1, true
		}
	}
	return 0, false
}

// base returns the staging-area offset of block b.
func (p *rxPool) base(b poolBlock) uint32 { return p.off + b.first*poolPage }

// free gives b's pages back.
func (p *rxPool) free(b poolBlock) {
	for i := range b.pages {
		p.used[b.first+i] = false
	}
	p.inUse--
}

// reclaim frees the blocks whose receive queue entries the application
// has released: those behind the queue's free-running released count,
// however far (reclaim runs only when room is needed, and a busy queue
// may have gone round many times since).
func (p *rxPool) reclaim(mem *endpoint.Memory) {
	j := 0
	for _, b := range p.held {
		if int32(mem.Released(b.q)-b.pos) > 0 {
			p.free(b)
			continue
		}
		p.held[j] = b
		j++
	}
	p.held = p.held[:j]
}

// poolDrop frees rx's block, if it has one that was never put (its message
// was returned, or abandoned for a newer one of its sender).
func poolDrop(rx *bulkRx) {
	if rx.pooled && !rx.put && rx.dst != nil && rx.dst.pool != nil {
		rx.dst.pool.free(rx.block)
		rx.dst.pool.arrived(rx)
	}
	rx.pooled = false
}

// Admission. A pooled bulk message's first chunk travels alone (its
// probe): the receiver finds the message a block as that chunk arrives,
// or refuses it (NACK) and the sender's transport offers it again after
// its back-off, holding one of its C channels to the receiver meanwhile.
// Once the probe is acknowledged the message is admitted and its other
// chunks follow, up to the window. Probes may not take every channel to a
// host while a message admitted there still has chunks to send: were the
// channels all held by probes that the full pool refuses, the admitted
// messages whose blocks fill the pool could never finish, and nothing
// would free a block (three senders with four channels each into a pool
// of five blocks wedged so). So a probe leaves only while probes plus one
// channel kept for the admitted messages stay within C: a full pool
// delays messages, it never wedges them.

// admitState is where a pooled bulk message stands in its admission.
type admitState uint8

const (
	admitNone    admitState = iota // not a pooled bulk message, or done with
	admitProbing                   // its first chunk is in flight
	admitted                       // its first chunk was acknowledged
)

// admission counts the pooled bulk messages under way to one host.
type admission struct{ probes, admitted int }

// pooledBulk reports whether the message in s's slot is a pooled bulk
// message.
func (s *epState) pooledBulk() bool {
	return s.d.Class == endpoint.ClassBulk && s.d.RemoteOffset == endpoint.PoolOffset
}

// setAdmit moves s's message to admission state st, towards p (ignored
// for admitNone), keeping the per-host counts.
func (e *Engine) setAdmit(s *epState, st admitState, p *transport.Peer) {
	if s.admit == st {
		return
	}
	if a := e.admits[s.admitPeer]; s.admit != admitNone && a != nil {
		if s.admit == admitProbing {
			a.probes--
		} else {
			a.admitted--
		}
		if a.probes == 0 && a.admitted == 0 {
			delete(e.admits, s.admitPeer)
		}
	}
	s.admit, s.admitPeer = st, nil
	if st == admitNone {
		return
	}
	a := e.admits[p]
	if a == nil {
		a = new(admission)
		e.admits[p] = a
	}
	if st == admitProbing {
		a.probes++
	} else {
		a.admitted++
	}
	s.admitPeer = p
}

// admitWaits reports whether the next chunk of s's message, for p, must
// wait: a pooled message's probe is unacknowledged, or a probe may not
// take another channel to p now.
func (e *Engine) admitWaits(s *epState, p *transport.Peer) bool {
	if p == nil || !s.pooledBulk() {
		return false
	}
	switch s.admit {
	case admitProbing:
		return true
	case admitted:
		return false
	}
	a := e.admits[p]
	if a == nil {
		return false
	}
	keep := 0
	if a.admitted > 0 {
		keep = 1
	}
	return a.probes+keep >= e.tr.Config().Channels
}
