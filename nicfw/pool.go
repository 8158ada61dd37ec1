package nicfw

import (
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

// poolPage is the pool's unit of allocation: a block is whole pages.
const poolPage = 1024

// rxPool is the engine's allocator of one endpoint's receive pool.
type rxPool struct {
	off, size uint32      // the pool, as the application set it
	used      []bool      // per page
	inUse     int         // blocks allocated
	held      []poolBlock // blocks of messages put and not yet released
}

// poolBlock is a block of the pool: pages from first, and for a message
// put, the receive queue and position of its descriptor.
type poolBlock struct {
	first, pages uint32
	q            endpoint.Queue
	pos          uint32
}

// poolAlloc finds a block for rx, a pooled bulk message of length bytes
// for endpoint s: ok false when none is free now (refuse the chunk for
// now); a reason when the message can never be stored.
func (e *Engine) poolAlloc(s *epState, rx *bulkRx, length uint32) (ok bool, reason endpoint.Reason) {
	off, size := s.mem.Pool()
	p := s.pool
	if p == nil || p.inUse == 0 && len(p.held) == 0 && (p.off != off || p.size != size) {
		p = &rxPool{off: off, size: size, used: make([]bool, size/poolPage)}
		s.pool = p
	}
	pages := (uint64(length) + poolPage - 1) / poolPage
	switch {
	case len(p.used) == 0:
		return false, endpoint.ReasonRange
	case pages > uint64(len(p.used)):
		return false, endpoint.ReasonTooLarge
	}
	first, found := p.find(int(pages))
	if !found {
		p.reclaim(s.mem)
		if first, found = p.find(int(pages)); !found {
			return false, 0
		}
	}
	for i := range int(pages) {
		p.used[first+i] = true
	}
	p.inUse++
	rx.pooled, rx.block = true, poolBlock{first: uint32(first), pages: uint32(pages)}
	return true, 0
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
