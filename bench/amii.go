package bench

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The AM-II ping: two nicfw engines run inline (each host's goroutine
// drives its engine through its AM-II endpoint), over AF_XDP with xam's XDP
// program on each device. Host A is engine host 1 with endpoint 1, host B
// engine host 2 with endpoint 1, both in one virtual network whose tables
// have one entry, the other endpoint.
const (
	amiiHostA    = nicfw.HostID(1)
	amiiHostB    = nicfw.HostID(2)
	amiiEndpoint = nicfw.EndpointID(1)
	amiiTag      = 0xa11
)

// AMIIResult is the outcome of an AM-II ping-pong: the ping result with
// the delivery accounting of SSAMResult.
type AMIIResult struct {
	PingResult
	Mode       string `json:"mode"`       // where the engines ran: inline or firmware
	Sent       int    `json:"sent"`       // requests sent
	Delivered  int    `json:"delivered"`  // request handlers run at the responder
	Duplicates int    `json:"duplicates"` // messages whose request handler ran more than once
	// Returned counts the messages that came back to the pinger, by
	// reason (return to sender: an endpoint or host gone, a queue full...).
	Returned map[string]int `json:"returned,omitempty"`
	// Retransmits counts the transports' retransmissions, both hosts'
	// (requests, replies and returns alike).
	Retransmits uint64 `json:"retransmits"`
}

// amiiHost is one host of the ping: its AF_XDP endpoint, engine and AM-II
// endpoint. Everything but Close belongs to the host's goroutine.
type amiiHost struct {
	raw *datapath.Endpoint
	eng *nicfw.Engine
	am  *amii.Endpoint
}

func (h *amiiHost) close() error {
	var errs []error
	if h.am != nil {
		errs = append(errs, h.am.Close())
	}
	if h.eng != nil {
		errs = append(errs, h.eng.Close())
	}
	if h.raw != nil {
		errs = append(errs, h.raw.Close())
	}
	return errors.Join(errs...)
}

// amiiKeys are the keys of an AM-II pair (nil: none): the virtual
// network's, which authenticates each message (nicfw.VNet.Key), and the
// engines' transport's, which authenticates each frame
// (transport.Config.Key).
type amiiKeys struct {
	vnet, transport []byte
}

// openAMII builds host id at p, whose peer is host peerID at peer: its
// AF_XDP socket on queue, an inline engine with window (and a channel per
// message in flight) and an AM-II endpoint with acfg, with keys.
func openAMII(p datapath.Place, id nicfw.HostID, peer datapath.Place, peerID nicfw.HostID, mode loader.Mode, queue, window int, acfg amii.Config, keys amiiKeys) (*amiiHost, error) {
	ec := nicfw.EngineConfig{Host: id, Window: window}
	if window > 1 {
		ec.Transport.Channels = max(window, transport.DefaultChannels) // a channel per message in flight
	}
	ec.Transport.Key = keys.transport
	table := []amii.Name{{Host: peerID, Endpoint: amiiEndpoint}}
	return openAMIIHost(p, ec, map[nicfw.HostID]datapath.Place{peerID: peer}, mode, queue, table, acfg, keys.vnet)
}

// openAMIIPair builds hosts A (at a, with ca) and B (at b, with cb) with
// openAMII; on an error nothing is left open.
func openAMIIPair(a, b datapath.Place, mode loader.Mode, queue, window int, ca, cb amii.Config, keys amiiKeys) (ha, hb *amiiHost, err error) {
	if ha, err = openAMII(a, amiiHostA, b, amiiHostB, mode, queue, window, ca, keys); err != nil {
		return nil, nil, fmt.Errorf("AM-II host A: %w", err)
	}
	if hb, err = openAMII(b, amiiHostB, a, amiiHostA, mode, queue, window, cb, keys); err != nil {
		ha.close()
		return nil, nil, fmt.Errorf("AM-II host B: %w", err)
	}
	return ha, hb, nil
}

// openAMIIHost builds a host at p: its AF_XDP socket on queue, an inline
// engine with ec that knows peers, and an AM-II endpoint with table and
// acfg.
func openAMIIHost(p datapath.Place, ec nicfw.EngineConfig, peers map[nicfw.HostID]datapath.Place, mode loader.Mode, queue int,
	table []amii.Name, acfg amii.Config, key []byte) (_ *amiiHost, err error) {
	h := &amiiHost{}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if h.raw, err = datapath.Open(p, mode, queue); err != nil {
		return nil, err
	}
	if h.eng, err = nicfw.NewEngine(h.raw.Link(), ec); err != nil {
		return nil, err
	}
	for id, peer := range peers {
		addr, err := h.raw.Peer(peer)
		if err != nil {
			return nil, err
		}
		if err = h.eng.AddHost(id, addr); err != nil {
			return nil, err
		}
	}
	if h.am, err = amii.New(h.eng, amii.VNet{ID: amiiEndpoint, Tag: amiiTag, Table: table, Key: key}, acfg); err != nil {
		return nil, err
	}
	return h, nil
}

// AMIIPing runs the AM-II request/reply ping-pong from a to b (two lab
// hosts, or the two ends of a veth pair) with two nicfw engines in inline
// mode, one goroutine per host driving its engine and its endpoint: b's
// request handler replies with the request's arguments, a sends the next
// request when the reply handler has run for the last one. cfg.Size is
// rounded up to whole 8-byte words, 8 at most (a short message); the
// first word carries the message's number. loss, when above 0, makes both
// hosts' XDP programs drop that fraction of xam frames; the engines'
// transports recover them.
func AMIIPing(a, b datapath.Place, cfg PingConfig, loss float64) (*AMIIResult, error) {
	return amiiPingKeyed(a, b, cfg, loss, nil)
}

// amiiPingKeyed is AMIIPing, the engines' transports authenticating
// every frame with transportKey if it is set (transport.Config.Key).
func amiiPingKeyed(a, b datapath.Place, cfg PingConfig, loss float64, transportKey []byte) (*AMIIResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	m, err := newAMIIPingMessage(cfg.Size)
	if err != nil {
		return nil, err
	}
	ha, hb, err := openAMIIPair(a, b, cfg.Mode, cfg.Queue, 1, amii.Config{}, amii.Config{}, amiiKeys{vnet: cfg.Key, transport: transportKey})
	if err != nil {
		return nil, err
	}
	defer ha.close()
	defer hb.close()
	if loss > 0 {
		for _, h := range []*amiiHost{ha, hb} {
			if err := h.raw.Prog.SetFaults(loader.Faults{DropRate: loss}); err != nil {
				return nil, err
			}
		}
	}
	var counts EchoCounts
	echoErr := echoAMII(hb.am, &counts)
	answered, returned := answerAMII(ha.am)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() {
		for !stop.Load() {
			if _, err := hb.am.Poll(); err != nil {
				serveErr = err
				return
			}
		}
	})
	r, err := amiiPing(ha.am, "inline", cfg, m, answered, returned)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, serveErr, *echoErr); err != nil {
		return nil, err
	}
	r.Delivered, r.Duplicates = counts.Delivered(), counts.Duplicates()
	r.Retransmits = ha.eng.TransportStats().Retransmits + hb.eng.TransportStats().Retransmits
	return r, nil
}

// FirmwareLayout is how a firmware-mode run places its two engines.
type FirmwareLayout struct {
	// Shape is where the engines run: ShapeGroup (the zero value),
	// ShapeThreads or ShapeDaemons.
	Shape FirmwareShape
	// Exe, with ShapeDaemons, is the xam program whose `xam fw` runs each
	// host's daemon.
	Exe string
	// Cores pins host i's engine thread (with ShapeGroup, Cores[0] pins
	// the one thread); none: not pinned.
	Cores [2][]int
	// Sleep is how long the engines poll without work before they sleep:
	// daemon.Config.Sleep (0: daemon.DefaultSleep; daemon.BusyPoll).
	Sleep time.Duration
}

// FirmwareShape is where a firmware-mode run's two engines run.
type FirmwareShape int

const (
	// ShapeGroup runs both hosts' engines in one thread of this process
	// (daemon.RunGroup): one NIC processor with two ports, what a machine
	// of few cores affords.
	ShapeGroup FirmwareShape = iota
	// ShapeThreads gives each host's engine a thread of its own in this
	// process.
	ShapeThreads
	// ShapeDaemons runs each host's engine as it is deployed: an `xam fw`
	// process per host (FirmwareLayout.Exe), the applications in this
	// process reaching it through its socket.
	ShapeDaemons
)

var shapeNames = [...]string{ShapeGroup: "group", ShapeThreads: "threads", ShapeDaemons: "daemons"}

func (s FirmwareShape) String() string {
	if s < 0 || int(s) >= len(shapeNames) {
		return fmt.Sprintf("FirmwareShape(%d)", int(s))
	}
	return shapeNames[s]
}

// ParseShape parses a FirmwareShape's name: daemons, group or threads.
func ParseShape(name string) (FirmwareShape, error) {
	for s, n := range shapeNames {
		if n == name {
			return FirmwareShape(s), nil
		}
	}
	return 0, fmt.Errorf("%q: want daemons, group or threads", name)
}

// AMIIFirmwarePing is AMIIPing with the engines in firmware mode: each host
// runs a daemon that owns the host's AF_XDP socket, placed as fw says (an
// `xam fw` process per host, or in this process, its engine goroutine
// locked to an OS thread, one thread for both or one each, on the cores fw
// gives), and each application reaches its endpoint through the daemon's
// unix socket (amii.Dial). The applications wait adaptively in Wait
// between messages (spinning a while, then blocking on the engine's
// eventfd). loss is as for AMIIPing; ShapeDaemons refuses it (the
// daemons' XDP programs are theirs).
func AMIIFirmwarePing(a, b datapath.Place, cfg PingConfig, loss float64, fw FirmwareLayout) (*AMIIResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	m, err := newAMIIPingMessage(cfg.Size)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "xam-fw-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	hosts, closeHosts, err := firmwareHosts(a, b, dir, cfg.Mode, cfg.Queue, fw, loss, nil, nil)
	if err != nil {
		return nil, err
	}
	defer closeHosts()
	ra, err := amii.Dial(hosts[0].sock, amii.VNet{ID: daemon.FirstUserEndpoint, Tag: amiiTag,
		Table: []amii.Name{{Host: amiiHostB, Endpoint: daemon.FirstUserEndpoint}}}, amii.Config{})
	if err != nil {
		return nil, fmt.Errorf("AM-II host A: %w", err)
	}
	defer ra.Close()
	rb, err := amii.Dial(hosts[1].sock, amii.VNet{ID: daemon.FirstUserEndpoint, Tag: amiiTag,
		Table: []amii.Name{{Host: amiiHostA, Endpoint: daemon.FirstUserEndpoint}}}, amii.Config{})
	if err != nil {
		return nil, fmt.Errorf("AM-II host B: %w", err)
	}
	defer rb.Close()

	var counts EchoCounts
	echoErr := echoAMII(rb, &counts)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() { serveErr = serveAMII(rb, &stop) })
	r, err := pingAMII(ra, cfg, m)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, serveErr, *echoErr); err != nil {
		return nil, err
	}
	r.Delivered, r.Duplicates = counts.Delivered(), counts.Duplicates()
	for _, h := range hosts {
		if s, err := h.stats(); err == nil {
			r.Retransmits += s.Transport.Retransmits
		}
	}
	return r, nil
}

// The handlers of an AM-II ping: on each side the short one is the first
// registered, the medium one the second.
const (
	pingShort  amii.HandlerID = 0
	pingMedium amii.HandlerID = 1
)

// amiiPingMessage is what an AM-II ping of a size sends: up to 8*MaxArgs
// bytes a short message of as many arguments, above that a medium message
// of that many bytes (up to endpoint.MaxMedium) with one argument, both
// carrying the round trip's number in their first argument.
type amiiPingMessage struct {
	nargs int
	data  []byte // nil: a short message
}

func newAMIIPingMessage(size int) (amiiPingMessage, error) {
	switch {
	case size <= 8*amii.MaxArgs:
		return amiiPingMessage{nargs: max(1, (size+7)/8)}, nil
	case size <= endpoint.MaxMedium:
		return amiiPingMessage{nargs: 1, data: make([]byte, size)}, nil
	}
	return amiiPingMessage{}, fmt.Errorf("an AM-II ping carries at most %d bytes (a medium message), not %d", endpoint.MaxMedium, size)
}

func (m amiiPingMessage) size() int {
	if m.data != nil {
		return len(m.data)
	}
	return 8 * m.nargs
}

// send sends the message numbered i from a to its first destination.
func (m amiiPingMessage) send(a *amii.Endpoint, args []uint64, i int) error {
	args[0] = uint64(i)
	if m.data != nil {
		return a.RequestMedium(0, pingMedium, m.data, args...)
	}
	return a.Request(0, pingShort, args...)
}

// echoAMII makes a the responder of AM-II pings: its first two handlers,
// registered here, answer each request with what it carried (pingShort a
// short one, pingMedium a medium one), counting the runs per message in
// counts. The returned error is the first reply that failed (read it once
// serving is over).
func echoAMII(a *amii.Endpoint, counts *EchoCounts) *error {
	var echoErr error
	note := func(err error) {
		if err != nil && echoErr == nil {
			echoErr = err
		}
	}
	a.Register(func(t *amii.Token, args []uint64) {
		if len(args) > 0 {
			counts.add(0, args[0])
		}
		note(t.Reply(pingShort, args...))
	})
	a.RegisterMedium(func(t *amii.Token, args []uint64, data []byte) {
		if len(args) > 0 {
			counts.add(0, args[0])
		}
		note(t.ReplyMedium(pingMedium, data, args...))
	})
	return &echoErr
}

// answerAMII makes a the pinger of AM-II pings: its first two handlers,
// registered here, take the answers (the number of the last answered in
// *answered), and its error handler the returns.
func answerAMII(a *amii.Endpoint) (*int, *pingReturns) {
	answered, returned := -1, newPingReturns()
	a.Register(func(t *amii.Token, args []uint64) { answered = int(args[0]) })
	a.RegisterMedium(func(t *amii.Token, args []uint64, _ []byte) { answered = int(args[0]) })
	a.OnReturn(returned.note)
	return &answered, returned
}

// serveAMII runs a's handlers, blocking in Wait between messages, until
// stop is set.
func serveAMII(a *amii.Endpoint, stop *atomic.Bool) error {
	for !stop.Load() {
		if _, err := a.Poll(); err != nil {
			return err
		}
		if _, err := a.Wait(10 * time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// pingAMII is the timed request/reply loop of firmware mode, from a to the
// endpoint of index 0 of its table, which echoes (echoAMII).
func pingAMII(a *amii.Endpoint, cfg PingConfig, m amiiPingMessage) (*AMIIResult, error) {
	answered, returned := answerAMII(a)
	return amiiPing(a, "firmware", cfg, m, answered, returned)
}

// pingReturns is what came back to the pinger: the number of the last
// request returned to sender, and the returns by reason.
type pingReturns struct {
	last int
	by   map[string]int
}

func newPingReturns() *pingReturns { return &pingReturns{last: -1, by: map[string]int{}} }

// note is the pinger's OnReturn.
func (p *pingReturns) note(r amii.Returned) {
	p.by[r.Reason.String()]++
	if len(r.Args) > 0 && r.Request {
		p.last = int(r.Args[0])
	}
}

// amiiPing is the pinging host's side: the timed request/reply loop of
// messages m to the echo (echoAMII), whose replies set answered and whose
// returns set returned (answerAMII). Inline, it polls (each poll runs the engine); in firmware
// mode it polls and then waits on the daemon's notification.
func amiiPing(a *amii.Endpoint, mode string, cfg PingConfig, m amiiPingMessage, answered *int, returned *pingReturns) (*AMIIResult, error) {
	r := &AMIIResult{Mode: mode, PingResult: *cfg.newResult("amii", m.size())}
	block := mode == "firmware"
	args := make([]uint64, m.nargs)
	// A request is answered or returned within the endpoint's reply
	// timeout (the default: bench's endpoints set none); past it and
	// cfg.Timeout the peer is taken to be gone.
	limit := cfg.Timeout + amii.DefaultReplyTimeout
	// The round trip's wait, made once: cur is the message waited for.
	cur := 0
	var wait func() error
	if block {
		wait = func() error { _, err := a.Wait(10 * time.Millisecond); return err }
	}
	poll := func() error { _, err := a.Poll(); return err }
	done := func() bool { return *answered >= cur || returned.last >= cur }
	what := func() string { return fmt.Sprintf("AM-II request %d neither answered nor returned", cur) }
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		start := time.Now()
		if err := m.send(a, args, i); err != nil {
			return nil, err
		}
		r.Sent++
		cur = i
		if err := r.await(&cfg, start, limit, poll, wait, done, what); err != nil {
			return nil, err
		}
		if r.Interrupted {
			break // the round trip in progress is not counted
		}
		r.record(i >= cfg.Warmup, *answered >= i, time.Since(start))
	}
	r.finish()
	if len(returned.by) > 0 {
		r.Returned = returned.by
	}
	return r, nil
}

// DaemonEndpoint names the endpoints of a ping between two running
// firmware daemons (`xam fw`): this host's daemon's socket, and the
// endpoint each side opens, both of the same number, in one virtual
// network (Tag).
type DaemonEndpoint struct {
	Socket   string
	Endpoint nicfw.EndpointID
	PeerHost nicfw.HostID // the other side's host id in the daemons' host table
	Tag      uint64
}

func (d DaemonEndpoint) open() (*amii.Endpoint, error) {
	return amii.Dial(d.Socket, amii.VNet{ID: d.Endpoint, Tag: d.Tag,
		Table: []amii.Name{{Host: d.PeerHost, Endpoint: d.Endpoint}}}, amii.Config{})
}

// DaemonTag is the virtual network of pings between running daemons,
// unless DaemonEndpoint.Tag says otherwise.
const DaemonTag = amiiTag

// AMIIDaemonPing pings, through the running daemon at d.Socket, the
// endpoint d.Endpoint on host d.PeerHost, which AMIIDaemonServe serves.
func AMIIDaemonPing(d DaemonEndpoint, cfg PingConfig) (*AMIIResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	m, err := newAMIIPingMessage(cfg.Size)
	if err != nil {
		return nil, err
	}
	a, err := d.open()
	if err != nil {
		return nil, err
	}
	defer a.Close()
	r, err := pingAMII(a, cfg, m)
	if r != nil {
		r.Delivered, r.Duplicates = -1, -1 // counted by the server
	}
	return r, err
}

// AMIIDaemonServe answers AM-II pings on endpoint d.Endpoint of the running
// daemon at d.Socket until stop is set, and returns the requests handled.
func AMIIDaemonServe(d DaemonEndpoint, stop *atomic.Bool) (int, error) {
	a, err := d.open()
	if err != nil {
		return 0, err
	}
	defer a.Close()
	var counts EchoCounts
	echoErr := echoAMII(a, &counts)
	err = serveAMII(a, stop)
	return counts.Delivered(), errors.Join(err, *echoErr)
}
