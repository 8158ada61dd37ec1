package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/grim/storage"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/transport"
)

// GRIM's runs: host A is peer 0 (engine host 1, the registry's central
// endpoint), host B peer 1 (engine host 2), both GRIM endpoints of id
// grimEndpoint; a storage endpoint on host B is peer 2. B's echo handler
// (grimEcho) answers a request with a short reply to A's grimAnswer,
// carrying the request's first integer.
const (
	grimEndpoint = nicfw.EndpointID(16)
	grimStorage  = nicfw.EndpointID(48)
	grimEcho     = grim.FirstUserHandler
	grimAnswer   = grim.FirstUserHandler + 1
	grimSink     = grim.FirstUserHandler + 2
)

// GRIMResult is the outcome of a GRIM ping-pong: the ping result with the
// delivery accounting of SSAMResult. A ping of at most 16 bytes is a short
// message (its four integers); a larger one a bulk message, answered by a
// short reply.
type GRIMResult struct {
	PingResult
	Mode       string `json:"mode"`    // where the engines ran: inline or firmware
	Message    string `json:"message"` // short or bulk
	Sent       int    `json:"sent"`
	Delivered  int    `json:"delivered"`
	Duplicates int    `json:"duplicates"`
	// Retransmits counts both hosts' transports' retransmissions.
	Retransmits uint64 `json:"retransmits"`
}

// grimSetup says how openGRIM builds the two hosts.
type grimSetup struct {
	firmware   bool
	fw         FirmwareLayout
	loss       float64
	window     int // the engines' window (default 1: per-channel order)
	channels   int // each endpoint's logical channels
	cutThrough bool
	pool       int  // the receive pool (0: grim's default)
	storage    bool // a storage endpoint on host B (firmware mode)
}

// grimPair is two hosts' GRIM endpoints, with what runs them.
type grimPair struct {
	a, b    *grim.Endpoint
	peers   []nicfw.Name
	raws    [2]*datapath.Endpoint
	engs    [2]*nicfw.Engine
	fw      [2]*firmwareHost
	dir     string
	store   *storage.Store
	stopFW  func()
	closers []func() error
}

func (p *grimPair) close() error {
	var errs []error
	for i := len(p.closers) - 1; i >= 0; i-- {
		errs = append(errs, p.closers[i]())
	}
	if p.stopFW != nil {
		p.stopFW()
	}
	for _, r := range p.raws {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
	return errors.Join(errs...)
}

// retransmits returns both hosts' transports' retransmissions.
func (p *grimPair) retransmits() uint64 {
	var n uint64
	for i := range 2 {
		if p.engs[i] != nil {
			n += p.engs[i].TransportStats().Retransmits
		}
		if p.fw[i] != nil {
			if s, err := p.fw[i].stats(); err == nil {
				n += s.Transport.Retransmits
			}
		}
	}
	return n
}

// openGRIM builds GRIM endpoints on a (peer 0) and b (peer 1) as s says.
func openGRIM(a, b datapath.Place, mode loader.Mode, queue int, s grimSetup) (_ *grimPair, err error) {
	if s.window == 0 {
		s.window = 1
	}
	p := &grimPair{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	peers := []nicfw.Name{{Host: amiiHostA, Endpoint: grimEndpoint}, {Host: amiiHostB, Endpoint: grimEndpoint}}
	if s.storage {
		peers = append(peers, nicfw.Name{Host: amiiHostB, Endpoint: grimStorage})
	}
	p.peers = peers
	cfg := func(self int) grim.Config {
		return grim.Config{Peers: peers, Self: self, Channels: s.channels, CutThrough: s.cutThrough, PoolSize: s.pool}
	}
	// Every channel resident: an engine endpoint each, more than the
	// engine's default number of frames at 16 channels.
	ec := nicfw.EngineConfig{Window: s.window, Resident: max(nicfw.DefaultResident, s.channels+4)}
	if s.window > 1 {
		ec.Transport.Channels = max(s.window, transport.DefaultChannels)
	}
	eps := [2]**grim.Endpoint{&p.a, &p.b}
	if s.firmware {
		if p.dir, err = os.MkdirTemp("", "xam-grim-"); err != nil {
			return nil, err
		}
		args := []string{"--window", strconv.Itoa(ec.Window), "--resident", strconv.Itoa(ec.Resident)}
		if ec.Transport.Channels > 0 {
			args = append(args, "--channels", strconv.Itoa(ec.Transport.Channels))
		}
		hosts, stop, err := firmwareHosts(a, b, p.dir, mode, queue, s.fw, s.loss, args, func(c *daemon.Config) {
			c.Engine.Window, c.Engine.Transport, c.Engine.Resident = ec.Window, ec.Transport, ec.Resident
		})
		if err != nil {
			return nil, err
		}
		p.fw, p.stopFW = hosts, stop
		for i := range 2 {
			ep, err := grim.Dial(hosts[i].sock, cfg(i))
			if err != nil {
				return nil, fmt.Errorf("GRIM host %c: %w", 'A'+i, err)
			}
			*eps[i] = ep
			p.closers = append(p.closers, ep.Close)
		}
		return p, nil
	}
	if s.storage {
		return nil, errors.New("the storage endpoint needs firmware mode (it shares host B's engine)")
	}
	places := [2]datapath.Place{a, b}
	ids := [2]nicfw.HostID{amiiHostA, amiiHostB}
	for i := range 2 {
		if p.raws[i], err = datapath.Open(places[i], mode, queue); err != nil {
			return nil, err
		}
		if s.loss > 0 {
			if err := p.raws[i].Prog.SetFaults(loader.Faults{DropRate: s.loss}); err != nil {
				return nil, err
			}
		}
		c := ec
		c.Host = ids[i]
		if p.engs[i], err = nicfw.NewEngine(p.raws[i].Link(), c); err != nil {
			return nil, err
		}
		p.closers = append(p.closers, p.engs[i].Close)
		peer, err := p.raws[i].Peer(places[1-i])
		if err != nil {
			return nil, err
		}
		if err := p.engs[i].AddHost(ids[1-i], peer); err != nil {
			return nil, err
		}
		ep, err := grim.New(p.engs[i], cfg(i))
		if err != nil {
			return nil, fmt.Errorf("GRIM host %c: %w", 'A'+i, err)
		}
		*eps[i] = ep
		p.closers = append(p.closers, ep.Close)
	}
	return p, nil
}

// serveGRIM runs ep (and its handlers; poll, if set, instead of ep.Poll)
// in a goroutine of its own, sleeping on the daemon's notifications when
// idle in firmware mode, until the returned function is called, which
// returns the first error.
func serveGRIM(ep *grim.Endpoint, poll func() (int, error)) func() error {
	if poll == nil {
		poll = ep.Poll
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var err error
	wg.Go(func() {
		// Neither locked to its thread nor yielding when Wait returns: a
		// locked goroutine's yield hands its processor to another thread
		// and back (GRIM's inline ping p50 17 µs where it is 8 µs
		// without; Wait yields now and then itself).
		for !stop.Load() {
			n, e := poll()
			if e != nil {
				err = e
				return
			}
			if n == 0 {
				if _, e := ep.Wait(time.Millisecond); e != nil {
					err = e
					return
				}
			}
		}
	})
	return func() error {
		stop.Store(true)
		wg.Wait()
		return err
	}
}

// GRIMPing runs GRIM's request/reply ping-pong from a to b: B's echo
// handler answers each request with a short reply; A sends the next
// request when the reply has run. cfg.Size up to 16 bytes is a short
// message, larger (up to grim.MaxBulk) a bulk message. Inline, each host's
// goroutine runs its engine; in firmware mode (fw) each host runs an engine
// daemon and the endpoints dial it. loss makes both XDP programs drop that
// fraction of xam frames.
func GRIMPing(a, b datapath.Place, cfg PingConfig, loss float64, firmware bool, fw FirmwareLayout) (*GRIMResult, error) {
	return grimPing(a, b, cfg, grimSetup{firmware: firmware, fw: fw, loss: loss})
}

// grimPing is GRIMPing on hosts built as s says, the pings spread over
// A's s.channels channels.
func grimPing(a, b datapath.Place, cfg PingConfig, s grimSetup) (*GRIMResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if cfg.Size > grim.MaxBulk {
		return nil, fmt.Errorf("a GRIM message carries at most %d bytes, not %d", grim.MaxBulk, cfg.Size)
	}
	p, err := openGRIM(a, b, cfg.Mode, cfg.Queue, s)
	if err != nil {
		return nil, err
	}
	defer p.close()
	var counts EchoCounts
	done, err := p.echo(&counts)
	if err != nil {
		return nil, err
	}
	r, err := grimPingLoop(p.a, cfg, max(1, s.channels), modeName(s.firmware))
	if err := errors.Join(err, done()); err != nil {
		return nil, err
	}
	r.Delivered, r.Duplicates = counts.Delivered(), counts.Duplicates()
	r.Retransmits = p.retransmits()
	return r, nil
}

// echo makes B the echo responder (grimEchoes, counting in counts if set)
// and serves it in a goroutine of its own until the returned function is
// called.
func (p *grimPair) echo(counts *EchoCounts) (stop func() error, err error) {
	if err := grimEchoes(p.b, counts); err != nil {
		return nil, err
	}
	return serveGRIM(p.b, nil), nil
}

func modeName(firmware bool) string {
	if firmware {
		return "firmware"
	}
	return "inline"
}

// grimEchoes registers b's echo handler: it counts each request and
// answers it with its first integer.
func grimEchoes(b *grim.Endpoint, counts *EchoCounts) error {
	return b.Handle(grimEcho, func(t *grim.Token, args [grim.ShortArgs]uint32, _ []byte) {
		if counts != nil {
			counts.add(0, uint64(args[0]))
		}
		t.Reply(grimAnswer, args[0]) //nolint:errcheck // a reply is never lost (deferred when the queue is full)
	})
}

// grimPingLoop is the pinging side: cfg.Warmup+cfg.Count round trips from
// a to peer 1's echo handler, the i-th on channel i%channels.
func grimPingLoop(a *grim.Endpoint, cfg PingConfig, channels int, mode string) (*GRIMResult, error) {
	msg := "short"
	var data []byte
	if cfg.Size > 4*grim.ShortArgs {
		msg, data = "bulk", make([]byte, cfg.Size)
	}
	r := &GRIMResult{Mode: mode, Message: msg, PingResult: *cfg.newResult("grim", cfg.Size)}
	answered := -1
	if err := a.Handle(grimAnswer, func(_ *grim.Token, args [grim.ShortArgs]uint32, _ []byte) { answered = int(args[0]) }); err != nil {
		return nil, err
	}
	// A request is answered, or returned, within the endpoint's reply
	// timeout (the default: bench's endpoints set none), as for AM-II
	// (amiiPing); past it and cfg.Timeout the peer is taken to be gone.
	limit := cfg.Timeout + grim.DefaultReplyTimeout
	// The round trip's wait, made once: cur is the message waited for.
	cur := 0
	var wait func() error
	if mode == "firmware" {
		wait = func() error { _, err := a.Wait(10 * time.Millisecond); return err }
	}
	poll := func() error { _, err := a.Poll(); return err }
	done := func() bool { return answered >= cur }
	what := func() string { return fmt.Sprintf("GRIM request %d not answered", cur) }
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		c, err := a.Channel(i % channels)
		if err != nil {
			return r, err
		}
		start := time.Now()
		if data != nil {
			err = c.Bulk(1, grimEcho, data, uint32(i))
		} else {
			err = c.Short(1, grimEcho, uint32(i))
		}
		if err != nil {
			return nil, err
		}
		r.Sent++
		cur = i
		if err := r.await(&cfg, start, limit, poll, wait, done, what); err != nil {
			return nil, err
		}
		if r.Interrupted {
			break
		}
		r.record(i >= cfg.Warmup, answered >= i, time.Since(start))
	}
	r.finish()
	return r, nil
}
