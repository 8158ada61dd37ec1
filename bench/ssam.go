package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
)

// ssamVCI is the VCI of the SSAM connection between two ping hosts (its
// bulk VC is ssamVCI+1): ssam.Open's.
const ssamVCI = ssam.VCI

// SSAMEndpoint is an SSAM endpoint over AF_XDP with one connection to a
// peer: xam's XDP program admitting only the connection's VCIs (SSAM's
// kernel VCI table), an AF_XDP socket, and the endpoint with its device
// (ssam.Open).
type SSAMEndpoint struct {
	Raw *datapath.Endpoint
	AM  *ssam.Endpoint
}

// OpenSSAM opens an SSAM endpoint at p with one connection to the host
// with MAC peer.
func OpenSSAM(p datapath.Place, peer net.HardwareAddr, mode loader.Mode, cfg ssam.Config) (*SSAMEndpoint, error) {
	raw, err := datapath.OpenConfig(p, mode, 0, loader.Config{DstMAC: p.MAC, Admission: true}, ssamVCI, ssamVCI+1)
	if err != nil {
		return nil, err
	}
	e := &SSAMEndpoint{Raw: raw}
	if e.AM, err = ssam.Open(raw.Sock, peer, cfg); err != nil {
		raw.Close()
		return nil, err
	}
	return e, nil
}

// Close tears the endpoint down.
func (e *SSAMEndpoint) Close() error {
	var errs []error
	if e.AM != nil {
		errs = append(errs, e.AM.Close())
	}
	if e.Raw != nil {
		errs = append(errs, e.Raw.Close())
	}
	return errors.Join(errs...)
}

// SSAMResult extends the ping result with SSAM's delivery accounting.
type SSAMResult struct {
	PingResult
	Sent      int `json:"sent"`      // requests sent
	Delivered int `json:"delivered"` // request handlers run (-1: not observable, the responder is remote)
	// Duplicates counts messages whose handler ran more than once (-1:
	// not observable from the requester; a remote responder reports its
	// own count).
	Duplicates  int    `json:"duplicates"`
	Retransmits uint64 `json:"retransmits"` // requests sent again after a timeout
}

// The ping's handlers: the responder's echo and the requester's reply
// handler are each the first handler registered on their endpoint.
const (
	ssamEchoHandler  = 0
	ssamReplyHandler = 0
)

// EchoCounts tells how often the echo handler ran for each message number
// of each requester session (one ping client after another: each numbers
// its messages from 0). The counts of the first denseCounts numbers sit in
// a slice, which keeps the echo handler's bookkeeping off the measured
// path (a map insert costs more than a tenth of a round trip); other
// numbers go to a map.
type EchoCounts struct {
	mu      sync.Mutex
	session uint64 // the responder's count of sessions when the counts began
	dense   []uint32
	sparse  map[uint64]uint32
	n       int
	dups    int // duplicates of earlier sessions
}

const denseCounts = 1 << 22

func (c *EchoCounts) add(session, i uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if session != c.session {
		c.dups += c.duplicates()
		c.session = session
		clear(c.dense)
		clear(c.sparse)
	}
	c.n++
	if i < denseCounts {
		if i >= uint64(len(c.dense)) {
			c.dense = append(c.dense, make([]uint32, int(i)+1-len(c.dense))...)
		}
		c.dense[i]++
		return
	}
	if c.sparse == nil {
		c.sparse = map[uint64]uint32{}
	}
	c.sparse[i]++
}

// Delivered returns the number of handler runs; Duplicates the number of
// messages whose handler ran more than once.
func (c *EchoCounts) Delivered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *EchoCounts) Duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dups + c.duplicates()
}

func (c *EchoCounts) duplicates() int {
	d := 0
	for _, n := range c.dense {
		if n > 1 {
			d++
		}
	}
	for _, n := range c.sparse {
		if n > 1 {
			d++
		}
	}
	return d
}

// Echo makes e the responder of SSAM pings: its first handler, registered
// here, echoes each request back to the requester's reply handler, counting
// the runs per message in counts. Then PollUntil serves, any number of
// requesters one after another.
func (e *SSAMEndpoint) Echo(counts *EchoCounts) error {
	if h := e.AM.Register(func(t *ssam.Token, data []byte) {
		session := e.AM.Stats().Sessions
		if len(data) >= 8 {
			counts.add(session, binary.BigEndian.Uint64(data))
		} else {
			counts.add(session, ^uint64(0))
		}
		t.Reply(ssamReplyHandler, data)
	}); h != ssamEchoHandler {
		return fmt.Errorf("the SSAM echo must be the endpoint's first handler (got %d)", h)
	}
	return nil
}

// syncSSAM begins a's session with b on connection 0 before anything is
// timed (ssam.Endpoint.Sync), polling both, for at most 2 s.
func syncSSAM(a, b *SSAMEndpoint) error {
	if err := a.AM.Sync(0); err != nil {
		return err
	}
	start := time.Now()
	for spins := 0; !a.AM.Synced(0); spins++ {
		if _, err := b.AM.Poll(); err != nil {
			return err
		}
		if _, err := a.AM.Poll(); err != nil {
			return err
		}
		if spins&1023 == 1023 && time.Since(start) > 2*time.Second {
			return errors.New("the SSAM session sync went unanswered for 2 s")
		}
	}
	return nil
}

// PollUntil polls the endpoint until stop is set, then flushes.
func (e *SSAMEndpoint) PollUntil(stop *atomic.Bool) error {
	for !stop.Load() {
		if _, err := e.AM.Poll(); err != nil {
			return err
		}
	}
	return e.AM.Flush()
}

// Ping runs the SSAM ping-pong from e to a peer endpoint that serves the
// echo (ServeEcho): each request carries size bytes and its number, and a
// round trip ends when the reply handler has run for it.
func (e *SSAMEndpoint) Ping(cfg PingConfig) (*SSAMResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if cfg.Size > e.AM.Config().MaxMessage {
		return nil, fmt.Errorf("%d-byte messages exceed the endpoint's %d", cfg.Size, e.AM.Config().MaxMessage)
	}
	var answered atomic.Int64 // highest message whose reply arrived, plus one
	if h := e.AM.Register(func(t *ssam.Token, data []byte) {
		if len(data) >= 8 {
			answered.Store(int64(binary.BigEndian.Uint64(data)) + 1)
		} else {
			answered.Add(1)
		}
	}); h != ssamReplyHandler {
		return nil, fmt.Errorf("the SSAM reply handler must be the endpoint's first handler (got %d)", h)
	}
	r := &SSAMResult{PingResult: *cfg.newResult("ssam", cfg.Size),
		Delivered: -1, Duplicates: -1}
	msg := make([]byte, cfg.Size)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		if len(msg) >= 8 {
			binary.BigEndian.PutUint64(msg, uint64(i))
		}
		start := time.Now()
		if err := e.AM.Request(0, ssamEchoHandler, msg); err != nil {
			return nil, err
		}
		r.Sent++
		for spins := 0; answered.Load() <= int64(i); spins++ {
			if _, err := e.AM.Poll(); err != nil {
				return nil, err
			}
			if spins&1023 == 1023 && r.stop(&cfg) {
				break
			}
			if spins&1023 == 1023 && time.Since(start) > cfg.Timeout+ssam.DefaultGiveUp {
				return nil, fmt.Errorf("SSAM request %d unanswered after %v", i, time.Since(start))
			}
		}
		if r.Interrupted {
			break // the round trip in progress is not counted
		}
		r.record(i >= cfg.Warmup, true, time.Since(start))
	}
	r.Retransmits = e.AM.Stats().Retransmits
	r.finish()
	return r, nil
}

// SSAMPing runs the SSAM ping-pong from a to b on one machine (two lab
// hosts), b echoing. loss, when above 0, makes both hosts' XDP programs
// drop that fraction of xam frames.
func SSAMPing(a, b datapath.Place, cfg PingConfig, loss float64, amc ssam.Config) (*SSAMResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if amc.MaxMessage == 0 {
		amc.MaxMessage = max(8192, cfg.Size)
	}
	ea, err := OpenSSAM(a, b.MAC, cfg.Mode, amc)
	if err != nil {
		return nil, fmt.Errorf("SSAM endpoint A: %w", err)
	}
	defer ea.Close()
	eb, err := OpenSSAM(b, a.MAC, cfg.Mode, amc)
	if err != nil {
		return nil, fmt.Errorf("SSAM endpoint B: %w", err)
	}
	defer eb.Close()
	if loss > 0 {
		for _, e := range []*SSAMEndpoint{ea, eb} {
			if err := e.Raw.Prog.SetFaults(loader.Faults{DropRate: loss}); err != nil {
				return nil, err
			}
		}
	}
	var counts EchoCounts
	if err := eb.Echo(&counts); err != nil {
		return nil, err
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var echoErr error
	wg.Go(func() { echoErr = eb.PollUntil(&stop) })
	r, err := ea.Ping(cfg)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, echoErr); err != nil {
		return nil, err
	}
	r.Delivered, r.Duplicates = counts.Delivered(), counts.Duplicates()
	return r, nil
}

// BulkResult is the outcome of a bulk transfer.
type BulkResult struct {
	API      string  `json:"api"`
	Bytes    int64   `json:"bytes"`
	Message  int     `json:"message_bytes"`
	Seconds  float64 `json:"seconds"`
	MBPerSec float64 `json:"mb_per_s"`
}

// SSAMBulk writes total bytes from a to b as requests of msg bytes each
// (AAL5 PDUs when msg > 40), pipelined through the window; b's handler
// takes the data and sends no reply, so each request is acknowledged
// explicitly. The rate counts data bytes, from the first request until the
// last is acknowledged.
func SSAMBulk(a, b datapath.Place, total int64, msg int, mode loader.Mode, amc ssam.Config) (*BulkResult, error) {
	if msg < 1 || msg > ssam.MaxBulk {
		return nil, fmt.Errorf("bulk message of %d bytes out of range [1, %d]", msg, ssam.MaxBulk)
	}
	if amc.MaxMessage == 0 {
		amc.MaxMessage = msg
	}
	ea, err := OpenSSAM(a, b.MAC, mode, amc)
	if err != nil {
		return nil, fmt.Errorf("SSAM endpoint A: %w", err)
	}
	defer ea.Close()
	eb, err := OpenSSAM(b, a.MAC, mode, amc)
	if err != nil {
		return nil, fmt.Errorf("SSAM endpoint B: %w", err)
	}
	defer eb.Close()
	var received, delivered atomic.Int64
	sink := eb.AM.Register(func(t *ssam.Token, data []byte) {
		received.Add(int64(len(data)))
		delivered.Add(1)
	})
	sent := int64(0)
	elapsed, err := stream(int((total+int64(msg)-1)/int64(msg)), &delivered,
		func() error {
			n := int(min(int64(msg), total-sent))
			sent += int64(n)
			if ea.AM.Buffer(0) == nil { // window full: Request polls for room
				return ea.AM.Request(0, sink, make([]byte, n))
			}
			return ea.AM.RequestBuffered(0, sink, n)
		},
		func() error { return ea.AM.Drain(30 * time.Second) },
		func() error { _, err := eb.AM.Poll(); return err },
		nil)
	if err != nil {
		return nil, err
	}
	if got := received.Load(); got != total {
		return nil, fmt.Errorf("%d of %d bytes delivered", got, total)
	}
	return &BulkResult{API: "ssam", Bytes: total, Message: msg, Seconds: elapsed.Seconds(),
		MBPerSec: float64(total) / elapsed.Seconds() / 1e6}, nil
}
