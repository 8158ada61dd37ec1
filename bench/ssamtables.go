package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/loader"
)

// SSAM's tables (von Eicken et al., section 4; shared/papers/README.md §1)
// with today's numbers, measured in one run between two places (two lab
// hosts), each figure beside its peers:
//
//  1. the traps of the SSAM device over AF_XDP (driver.Open): send one
//     cell (and a batch of sixteen), receive one and sixteen cells,
//     send-receive, and a null system call for reference;
//  2. the same calls on the system-call path (driver.OpenPacket: AF_PACKET,
//     a system call per cell);
//  3. the Active Messages layer over AF_XDP: send request, handle request,
//     reply, handle reply, explicit ack;
//  4. round trips (HDR histograms) of SSAM, raw AF_XDP, kernel UDP and
//     kernel TCP, and the bandwidth of an SSAM bulk write next to a TCP
//     stream and a UDP blast of the same bytes;
//
// and the memory the device pins per peer.
//
// How costs are timed. Reading the clock costs tens to hundreds of
// nanoseconds on a VM, as much as some of the calls measured, so no call is
// timed alone: calls run in rounds, the clock is read once per round, and
// each figure is the total time divided by the calls. What a call needs in
// place (cells that have arrived, a window with room) is arranged between
// rounds, untimed; over AF_XDP the XDP program's Redirected counter says
// when the frames a round will receive have reached the socket. Rounds are
// small enough that no ring overflows. The one exception is Token.Reply,
// which runs inside a handler inside Poll: it is bracketed with clock reads,
// and the cost of an empty bracket, measured in the same run, is subtracted.

// SSAMTablesConfig configures RunSSAMTables.
type SSAMTablesConfig struct {
	Count       int         // round trips per path, and calls timed per cost; default 20000
	Bulk        int64       // bytes of each bandwidth run; default 64 MiB
	BulkMessage int         // bytes per SSAM message, TCP write and UDP datagram; default 8192
	Mode        loader.Mode // XDP attach mode (default as the doctor recommends)
	// Progress, if set, is told what is measured next.
	Progress func(what string)
	// Stop, when set (by a signal handler, say), ends the run before its
	// next measurement: the tables hold what was measured and are marked
	// Interrupted.
	Stop *atomic.Bool
}

func (c *SSAMTablesConfig) fill() error {
	if c.Count == 0 {
		c.Count = 20000
	}
	if c.Bulk == 0 {
		c.Bulk = 64 << 20
	}
	if c.BulkMessage == 0 {
		c.BulkMessage = 8192
	}
	switch {
	case c.Count < 1:
		return fmt.Errorf("bench: count %d: want at least 1", c.Count)
	case c.Bulk < 1:
		return fmt.Errorf("bench: bulk %d bytes: want at least 1", c.Bulk)
	case c.BulkMessage < 1 || c.BulkMessage > ssam.MaxBulk || c.BulkMessage > maxDatagram:
		return fmt.Errorf("bench: bulk message of %d bytes out of range [1, %d]", c.BulkMessage, min(ssam.MaxBulk, maxDatagram))
	}
	return nil
}

// maxDatagram is the largest UDP payload over IPv4.
const maxDatagram = 65507

// ssamMessage is the data of the single-cell messages: as in the round
// trips, 32 of the cell's 40 data bytes.
const ssamMessage = 32

// Paper is what the SSAM paper reported, for context.
type Paper struct {
	Source       string  `json:"source"`
	Setup        string  `json:"setup"`
	RTTMicros    float64 `json:"rtt_us"`        // application to application, small messages
	BulkMBPerSec float64 `json:"bulk_mb_per_s"` // bulk transfer
}

// PaperSSAM holds SSAM's headline figures (the paper's abstract).
var PaperSSAM = Paper{
	Source:       "von Eicken, Avula, Basu, Buch: Low-Latency Communication over ATM Networks using Active Messages (1994)",
	Setup:        "SPARCstations, Fore SBA-100 on the SBus, 140 Mbit/s TAXI, no switch",
	RTTMicros:    20,
	BulkMBPerSec: 5.5,
}

// Cost is one measured operation of parts 1-3: the mean time of Calls
// calls.
type Cost struct {
	Op        string  `json:"op"` // short stable name: send, recv1, recv16, sendrecv, null_syscall, ...
	What      string  `json:"what"`
	Calls     int     `json:"calls"`
	NsPerCall float64 `json:"ns_per_call"`
	Cells     int     `json:"cells_per_call,omitempty"`
	NsPerCell float64 `json:"ns_per_cell,omitempty"`
	Syscalls  int     `json:"syscalls_per_call,omitempty"` // system calls one call makes (system-call path)
	// EmptyReceives counts receive calls in the timed rounds that found
	// nothing (a cell arrived late); their time is in the figure.
	EmptyReceives int `json:"empty_receives,omitempty"`
}

func newCost(op, what string, calls int, total time.Duration, cellsPerCall int) Cost {
	c := Cost{Op: op, What: what, Calls: calls, Cells: cellsPerCall}
	if calls > 0 {
		c.NsPerCall = roundTo(float64(total.Nanoseconds())/float64(calls), 1)
	}
	if cellsPerCall > 0 {
		c.NsPerCell = roundTo(c.NsPerCall/float64(cellsPerCall), 1)
	}
	return c
}

// roundTo rounds v to the given decimal places, for the JSON.
func roundTo(v float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(v*p) / p
}

// RTTRow is one path of the round-trip table.
type RTTRow struct {
	Path      string  `json:"path"` // raw, ssam, udp, tcp
	What      string  `json:"what"`
	Count     int     `json:"count"`
	Size      int     `json:"size"`
	Lost      int     `json:"lost"`
	RTT       RTT     `json:"rtt_ns"`
	P50VsRaw  float64 `json:"p50_vs_raw"`
	P99VsRaw  float64 `json:"p99_vs_raw"`
	P50VsSSAM float64 `json:"p50_vs_ssam"`
	P99VsSSAM float64 `json:"p99_vs_ssam"`
}

// BandwidthRow is one path of the bandwidth table.
type BandwidthRow struct {
	Path     string  `json:"path"` // ssam, tcp, udp
	What     string  `json:"what"`
	Bytes    int64   `json:"bytes"` // delivered
	Message  int     `json:"message_bytes"`
	Seconds  float64 `json:"seconds"`
	MBPerSec float64 `json:"mb_per_s"`
	VsSSAM   float64 `json:"vs_ssam"`
	Sent     int     `json:"datagrams_sent,omitempty"`
	Received int     `json:"datagrams_received,omitempty"`
	Loss     float64 `json:"loss"` // fraction of datagrams lost (UDP)
}

// Memory is what an SSAM device pins.
type Memory struct {
	Window       int `json:"window"`
	MaxMessage   int `json:"max_message"`
	SendSlots    int `json:"send_slots"` // 48-byte payload slots per connection
	RecvSlots    int `json:"recv_slots"` // 53-byte cells per connection
	PinnedBytes  int `json:"pinned_bytes"`
	PerPeerBytes int `json:"per_peer_bytes"` // what one more connection adds
}

// Setup describes where the tables were measured; the caller fills it in.
type Setup struct {
	Kernel string `json:"kernel,omitempty"`
	CPUs   int    `json:"cpus,omitempty"`
	Lab    string `json:"lab,omitempty"`
}

// SSAMTables is the outcome of RunSSAMTables (the JSON of `xam bench ssam`).
type SSAMTables struct {
	Setup       Setup          `json:"setup"`
	Count       int            `json:"count"`
	Bulk        int64          `json:"bulk_bytes"`
	Traps       []Cost         `json:"traps"`     // part 1: AF_XDP
	Syscalls    []Cost         `json:"syscalls"`  // part 2: AF_PACKET
	AM          []Cost         `json:"am"`        // part 3
	RTT         []RTTRow       `json:"rtt"`       // part 4
	Bandwidth   []BandwidthRow `json:"bandwidth"` // part 4
	Memory      Memory         `json:"memory"`
	ClockNs     float64        `json:"clock_bracket_ns"` // an empty time.Now/time.Since bracket
	Paper       Paper          `json:"paper"`
	Retransmits uint64         `json:"ssam_retransmits"` // during the AM-layer and round-trip runs
	Interrupted bool           `json:"interrupted,omitempty"`

	hists map[string]*hdrhistogram.Histogram
}

// Histogram returns the round trips recorded for path (raw, ssam, udp,
// tcp), or nil.
func (t *SSAMTables) Histogram(path string) *hdrhistogram.Histogram { return t.hists[path] }

// RunSSAMTables measures SSAM's tables between a and b, whose IPv4
// addresses are aAddr and bAddr. No XDP program may be attached to either
// device when it starts.
func RunSSAMTables(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg SSAMTablesConfig) (*SSAMTables, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	t := &SSAMTables{Count: cfg.Count, Bulk: cfg.Bulk, Paper: PaperSSAM, hists: map[string]*hdrhistogram.Histogram{}}
	// step says what is measured next, or false when the run is to stop.
	step := stepper(cfg.Stop, cfg.Progress, &t.Interrupted)
	var err error
	if !step("trap costs over AF_XDP") {
		return t, nil
	}
	if t.Traps, t.Memory, err = xdpTraps(a, b, cfg); err != nil {
		return nil, fmt.Errorf("trap costs over AF_XDP: %w", err)
	}
	if !step("the same calls through AF_PACKET system calls") {
		return t, nil
	}
	if t.Syscalls, err = packetTraps(a, b, cfg); err != nil {
		return nil, fmt.Errorf("system-call path: %w", err)
	}
	t.Syscalls = append([]Cost{t.Traps[0]}, t.Syscalls...) // the null system call, for reference
	if !step("the Active Messages layer") {
		return t, nil
	}
	if t.AM, t.ClockNs, t.Retransmits, err = amCosts(a, b, cfg); err != nil {
		return nil, fmt.Errorf("AM layer: %w", err)
	}
	if err := t.roundTrips(a, b, aAddr, bAddr, cfg, step); err != nil {
		return nil, err
	}
	if err := t.bandwidth(a, b, aAddr, bAddr, cfg, step); err != nil {
		return nil, err
	}
	return t, nil
}

// timeRounds times ops calls of op in rounds of at most round calls, with
// prepare(k) run untimed before each round of k; the clock is read twice a
// round.
func timeRounds(ops, round int, prepare func(k int) error, op func() error) (time.Duration, error) {
	var total time.Duration
	for done := 0; done < ops; {
		k := min(round, ops-done)
		if prepare != nil {
			if err := prepare(k); err != nil {
				return 0, err
			}
		}
		start := time.Now()
		for range k {
			if err := op(); err != nil {
				return 0, err
			}
		}
		total += time.Since(start)
		done += k
	}
	return total, nil
}

// nullSyscall times n getppid(2) system calls.
func nullSyscall(n int) Cost {
	runtime.GC()
	start := time.Now()
	for range n {
		syscall.Syscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
	return newCost("null_syscall", "getppid(2) through syscall.Syscall, for reference", n, time.Since(start), 0)
}

// arrivals tells when frames have reached a device's link.
type arrivals interface {
	// mark returns a count of frames that have reached d's link.
	mark(d *driver.Device) (uint64, error)
	// wait waits until frames more frames than at mark have reached it.
	wait(d *driver.Device, mark, frames uint64) error
}

// xdpArrivals counts with the XDP programs' Redirected counters.
type xdpArrivals map[*driver.Device]*loader.Program

func (x xdpArrivals) mark(d *driver.Device) (uint64, error) {
	c, err := x[d].Counters()
	return c.Redirected, err
}

func (x xdpArrivals) wait(d *driver.Device, mark, frames uint64) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, err := x.mark(d)
		if err != nil {
			return err
		}
		if n >= mark+frames {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d frames reached the socket in 2 s", n-mark, frames)
		}
		runtime.Gosched()
	}
}

// packetArrivals waits for an AF_PACKET device's socket to hold a frame.
// On a veth pair a frame is delivered to the peer's socket inside the
// sendto that sends it, so once the first has arrived all have; a late one
// shows in Cost.EmptyReceives.
type packetArrivals struct{}

func (packetArrivals) mark(*driver.Device) (uint64, error) { return 0, nil }

func (packetArrivals) wait(d *driver.Device, _, _ uint64) error {
	ok, err := d.Wait(2 * time.Second)
	if err == nil && !ok {
		err = errors.New("bench: no frame reached the AF_PACKET socket in 2 s")
	}
	return err
}

// drainDevice receives and takes everything waiting for d.
func drainDevice(d *driver.Device) error {
	for {
		n, err := d.Recv(d.RecvBatch())
		if err != nil {
			return err
		}
		for c := range d.NumConns() {
			for _, ok := d.Take(c); ok; _, ok = d.Take(c) {
			}
		}
		if n == 0 {
			return nil
		}
	}
}

// trapCosts times the device's calls: tx sends to rx (and, for
// send-receive, rx to tx). Both devices have one connection and send areas
// of the same size.
func trapCosts(tx, rx *driver.Device, arr arrivals, ops int, syscalls bool) ([]Cost, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := len(tx.SendArea(0))/cells.PayloadSize - 1
	if mask < 15 || len(rx.SendArea(0)) != len(tx.SendArea(0)) {
		return nil, fmt.Errorf("bench: send areas of %d and %d bytes", len(tx.SendArea(0)), len(rx.SendArea(0)))
	}
	for i, area := range [][]byte{tx.SendArea(0), rx.SendArea(0)} {
		for j := range area {
			area[j] = byte(i + j)
		}
	}
	off := 0
	next := func(n int) int {
		o := off
		off = (off + n) & mask
		return o
	}
	empty := 0
	// recvN receives until d has delivered want cells (got already).
	recvN := func(d *driver.Device, got, want int) error {
		var since time.Time
		for tries := 1; got < want; tries++ {
			n, err := d.Recv(want - got)
			if err != nil {
				return err
			}
			if n == 0 {
				empty++
				if tries&1023 == 0 {
					if since.IsZero() {
						since = time.Now()
					} else if time.Since(since) > 2*time.Second {
						return fmt.Errorf("bench: %d of %d cells arrived", got, want)
					}
				}
			}
			got += n
		}
		return nil
	}
	take := func(d *driver.Device, n int) error {
		for range n {
			if _, ok := d.Take(0); !ok {
				return errors.New("bench: a received cell is not in the ring")
			}
		}
		return nil
	}
	// send sends k batches of n cells from d, and waits until their frames
	// have reached peer.
	send := func(d, peer *driver.Device, k, n int) error {
		if err := drainDevice(peer); err != nil {
			return err
		}
		m, err := arr.mark(peer)
		if err != nil {
			return err
		}
		for range k {
			if n == 1 {
				err = d.Send(0, next(1), driver.EOM)
			} else {
				err = d.SendBatch(0, next(n), n, driver.EOM)
			}
			if err != nil {
				return err
			}
		}
		perBatch := (n + d.CellsPerFrame() - 1) / d.CellsPerFrame()
		return arr.wait(peer, m, uint64(k*perBatch))
	}
	sc := func(n int) int {
		if syscalls {
			return n
		}
		return 0
	}
	var out []Cost
	add := func(op, what string, total time.Duration, cellsPerCall, sys int) {
		c := newCost(op, what, ops, total, cellsPerCall)
		c.Syscalls = sc(sys)
		c.EmptyReceives, empty = empty, 0
		out = append(out, c)
	}

	runtime.GC()
	total, err := timeRounds(ops, 256, func(int) error { return drainDevice(rx) }, func() error {
		return tx.Send(0, next(1), driver.EOM)
	})
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	add("send", "Send: one cell from the send area, in a frame of its own", total, 1, 1)

	per16 := (16 + tx.CellsPerFrame() - 1) / tx.CellsPerFrame()
	total, err = timeRounds(ops, 32, func(int) error { return drainDevice(rx) }, func() error {
		return tx.SendBatch(0, next(16), 16, driver.EOM)
	})
	if err != nil {
		return nil, fmt.Errorf("send 16: %w", err)
	}
	add("send16", fmt.Sprintf("SendBatch(16): 16 cells from the send area, in %d frame(s)", per16), total, 16, per16)

	total, err = timeRounds(ops, 256, func(k int) error { return send(tx, rx, k, 1) }, func() error {
		if err := recvN(rx, 0, 1); err != nil {
			return err
		}
		return take(rx, 1)
	})
	if err != nil {
		return nil, fmt.Errorf("receive 1: %w", err)
	}
	add("recv1", "Recv(1) + Take: one cell that came in a frame of its own", total, 1, 1)

	total, err = timeRounds(ops, 64, func(k int) error { return send(tx, rx, k, 16) }, func() error {
		if err := recvN(rx, 0, 16); err != nil {
			return err
		}
		return take(rx, 16)
	})
	if err != nil {
		return nil, fmt.Errorf("receive 16: %w", err)
	}
	add("recv16", fmt.Sprintf("Recv(16) + 16 Take: 16 cells that came in %d frame(s)", per16), total, 16, per16)

	total, err = timeRounds(ops, 256, func(k int) error {
		if err := drainDevice(rx); err != nil {
			return err
		}
		return send(rx, tx, k, 1)
	}, func() error {
		n, err := tx.SendRecv(0, next(1), driver.EOM, 1)
		if err != nil {
			return err
		}
		if err := recvN(tx, n, 1); err != nil {
			return err
		}
		return take(tx, 1)
	})
	if err != nil {
		return nil, fmt.Errorf("send-receive: %w", err)
	}
	add("sendrecv", "SendRecv(1) + Take: send a cell, receive one waiting", total, 1, 2)
	return out, nil
}

// xdpTraps measures part 1 on the SSAM devices of two SSAM endpoints at
// their defaults, and what those devices pin.
func xdpTraps(a, b datapath.Place, cfg SSAMTablesConfig) ([]Cost, Memory, error) {
	ea, err := OpenSSAM(a, b.MAC, cfg.Mode, ssam.Config{})
	if err != nil {
		return nil, Memory{}, fmt.Errorf("SSAM endpoint A: %w", err)
	}
	defer ea.Close()
	eb, err := OpenSSAM(b, a.MAC, cfg.Mode, ssam.Config{})
	if err != nil {
		return nil, Memory{}, fmt.Errorf("SSAM endpoint B: %w", err)
	}
	defer eb.Close()
	mem, err := pinned(ea)
	if err != nil {
		return nil, Memory{}, fmt.Errorf("pinned memory: %w", err)
	}
	costs := []Cost{nullSyscall(max(10*cfg.Count, 100000))}
	more, err := trapCosts(ea.AM.Device(), eb.AM.Device(), xdpArrivals{ea.AM.Device(): ea.Raw.Prog, eb.AM.Device(): eb.Raw.Prog}, cfg.Count, false)
	if err != nil {
		return nil, Memory{}, err
	}
	return append(costs, more...), mem, nil
}

// pinned reports what e's device pins, and what one more peer would add
// (measured on devices with one and two connections over an in-memory
// link of the same MTU).
func pinned(e *SSAMEndpoint) (Memory, error) {
	c := e.AM.Config()
	m := Memory{
		Window: c.Window, MaxMessage: c.MaxMessage,
		SendSlots:   len(e.AM.Device().SendArea(0)) / cells.PayloadSize,
		RecvSlots:   driver.DefaultRecvSlots, // OpenSSAM's
		PinnedBytes: e.AM.Device().PinnedBytes(),
	}
	la, lb, err := memlink.NewPair(memlink.Options{MTU: e.Raw.Sock.MTU()})
	if err != nil {
		return m, err
	}
	defer la.Close()
	defer lb.Close()
	var sizes [2]int
	for n := range 2 {
		dc := driver.Config{SendSlots: m.SendSlots, RecvSlots: m.RecvSlots}
		for i := range n + 1 {
			v := uint16(SSAMVCI + 2*i)
			dc.Conns = append(dc.Conns, driver.ConnSpec{Peer: lb.HardwareAddr(), SendVCI: v, RecvVCI: v})
		}
		d, err := driver.Open(la, dc)
		if err != nil {
			return m, err
		}
		sizes[n] = d.PinnedBytes()
		if err := d.Close(); err != nil {
			return m, err
		}
	}
	m.PerPeerBytes = sizes[1] - sizes[0]
	return m, nil
}

// packetTraps measures part 2: devices opened with driver.OpenPacket, as
// the AF_XDP ones are configured.
func packetTraps(a, b datapath.Place, cfg SSAMTablesConfig) ([]Cost, error) {
	slots := ssam.SendSlots(8, 8192) // OpenSSAM's default window and message size
	var devs [2]*driver.Device
	for i, s := range []struct{ here, peer datapath.Place }{{a, b}, {b, a}} {
		err := s.here.Do(func() (err error) {
			devs[i], err = driver.OpenPacket(s.here.Ifindex, driver.Config{
				Conns:     []driver.ConnSpec{{Peer: s.peer.MAC, SendVCI: SSAMVCI, RecvVCI: SSAMVCI}},
				SendSlots: slots,
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("AF_PACKET device %c: %w", 'A'+i, err)
		}
		defer devs[i].Close()
	}
	return trapCosts(devs[0], devs[1], packetArrivals{}, cfg.Count, true)
}

// amWindow is the window of the endpoints that measure the AM layer: the
// largest, so that a round of requests is long.
const amWindow = ssam.MaxWindow

// amCosts measures part 3 over AF_XDP between SSAM endpoints at a (the
// requester) and b (the responder), both driven from this goroutine. A
// round: a sends a window of requests (b does not poll, so nothing comes
// back); once they have reached b's socket, b polls until it has handled
// them all; once the answers have reached a's socket, a polls until the
// window is empty. Three kinds of rounds, interleaved: b's handler replies;
// it sends nothing (b acks explicitly); it replies inside a clock bracket
// (which times Token.Reply alone, and, by difference, the rest of b's
// poll). The retransmission timeout is a second, so nothing is resent.
func amCosts(a, b datapath.Place, cfg SSAMTablesConfig) ([]Cost, float64, uint64, error) {
	amc := ssam.Config{Window: amWindow, Timeout: time.Second}
	ea, err := OpenSSAM(a, b.MAC, cfg.Mode, amc)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("SSAM endpoint A: %w", err)
	}
	defer ea.Close()
	eb, err := OpenSSAM(b, a.MAC, cfg.Mode, amc)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("SSAM endpoint B: %w", err)
	}
	defer eb.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var replyH uint32
	var handlerErr error
	var inReply time.Duration // time inside the Reply brackets
	replying := eb.AM.Register(func(t *ssam.Token, data []byte) {
		if err := t.Reply(replyH, data); err != nil && handlerErr == nil {
			handlerErr = err
		}
	})
	silent := eb.AM.Register(func(*ssam.Token, []byte) {})
	bracketed := eb.AM.Register(func(t *ssam.Token, data []byte) {
		start := time.Now()
		err := t.Reply(replyH, data)
		inReply += time.Since(start)
		if err != nil && handlerErr == nil {
			handlerErr = err
		}
	})
	replies := 0
	replyH = ea.AM.Register(func(*ssam.Token, []byte) { replies++ })

	if err := syncSSAM(ea, eb); err != nil {
		return nil, 0, 0, err
	}
	arr := xdpArrivals{ea.AM.Device(): ea.Raw.Prog, eb.AM.Device(): eb.Raw.Prog}
	msg := make([]byte, ssamMessage)
	const W = amWindow
	// poll polls e until done, failing after 2 s.
	poll := func(e *SSAMEndpoint, done func(handled int) bool) error {
		handled := 0
		var since time.Time
		for tries := 1; !done(handled); tries++ {
			n, err := e.AM.Poll()
			if err != nil {
				return err
			}
			handled += n
			if tries&1023 == 0 {
				if since.IsZero() {
					since = time.Now()
				} else if time.Since(since) > 2*time.Second {
					return errors.New("bench: polled for 2 s and the round did not finish")
				}
			}
		}
		return nil
	}
	var send, handle, back [3]time.Duration // by kind of round
	round := func(kind int, h uint32) error {
		mb, err := arr.mark(eb.AM.Device())
		if err != nil {
			return err
		}
		start := time.Now()
		for range W {
			if err := ea.AM.Request(0, h, msg); err != nil {
				return err
			}
		}
		send[kind] += time.Since(start)
		if err := arr.wait(eb.AM.Device(), mb, W); err != nil {
			return err
		}
		ma, err := arr.mark(ea.AM.Device())
		if err != nil {
			return err
		}
		start = time.Now()
		if err := poll(eb, func(n int) bool { return n >= W }); err != nil {
			return err
		}
		handle[kind] += time.Since(start)
		if err := arr.wait(ea.AM.Device(), ma, W); err != nil {
			return err
		}
		start = time.Now()
		if err := poll(ea, func(int) bool { return ea.AM.Outstanding(0) == 0 }); err != nil {
			return err
		}
		back[kind] += time.Since(start)
		return handlerErr
	}
	rounds := (cfg.Count + W - 1) / W
	runtime.GC()
	for range rounds {
		for kind, h := range []uint32{replying, silent, bracketed} {
			if err := round(kind, h); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	if want := 2 * rounds * W; replies != want {
		return nil, 0, 0, fmt.Errorf("bench: %d replies handled, want %d", replies, want)
	}
	clock := clockBracket(max(cfg.Count, 100000))
	n := rounds * W
	per := func(d time.Duration, calls int) float64 { return float64(d.Nanoseconds()) / float64(calls) }
	cost := func(op, what string, ns float64, calls int) Cost {
		return Cost{Op: op, What: what, Calls: calls, NsPerCall: roundTo(ns, 1)}
	}
	// The brackets cost about one clock read outside what they measure
	// and one inside: take one off each side.
	reply := per(inReply, n) - clock
	dispatch := per(handle[2]-inReply, n) - clock
	costs := []Cost{
		cost("send_request", fmt.Sprintf("Request: a %d-byte single-cell request, window open (its poll finds nothing)", ssamMessage),
			per(send[0]+send[1]+send[2], 3*n), 3*n),
		cost("handle_request", "responder's Poll per request: receive, check, dispatch, run the handler (less its reply)",
			dispatch, n),
		cost("reply", "Token.Reply alone, timed in the handler (the cost of a clock bracket subtracted)", reply, n),
		cost("handle_request_reply", "responder's Poll per request whose handler replies (the two rows above)",
			per(handle[0], n), n),
		cost("handle_reply", "requester's Poll per reply: receive, check, advance the window, run the reply handler",
			per(back[0]+back[2], 2*n), 2*n),
		cost("explicit_ack", "responder's Poll per request whose handler sends no reply: SSAM acks it",
			per(handle[1], n), n),
		cost("handle_ack", "requester's Poll per explicit ack", per(back[1], n), n),
	}
	if reply <= 0 || dispatch <= 0 {
		return nil, 0, 0, fmt.Errorf("bench: Token.Reply (%.0f ns) or the rest of the responder's poll (%.0f ns) within the cost of a clock bracket (%.0f ns)",
			reply+clock, dispatch+clock, clock)
	}
	return costs, roundTo(clock, 1), ea.AM.Stats().Retransmits + eb.AM.Stats().Retransmits, nil
}

// clockBracket returns the mean cost of an empty time.Now/time.Since
// bracket, over n brackets.
func clockBracket(n int) float64 {
	var sum time.Duration
	for range n {
		start := time.Now()
		sum += time.Since(start)
	}
	return float64(sum.Nanoseconds()) / float64(n)
}

// roundTrips measures part 4's round trips.
func (t *SSAMTables) roundTrips(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg SSAMTablesConfig, step func(string) bool) error {
	pc := PingConfig{Count: cfg.Count, Size: ssamMessage, Mode: cfg.Mode}
	paths := []struct {
		path, what string
		ping       func() (*PingResult, error)
	}{
		{"raw", "xam frames over AF_XDP, echoed by the peer", func() (*PingResult, error) { return RawPing(a, b, pc) }},
		{"ssam", "SSAM request/reply, single cell, reliable", func() (*PingResult, error) {
			r, err := SSAMPing(a, b, pc, 0, ssam.Config{})
			if err != nil {
				return nil, err
			}
			t.Retransmits += r.Retransmits
			return &r.PingResult, nil
		}},
		{"udp", "kernel UDP sockets, blocking echo", func() (*PingResult, error) { return UDPPing(a, b, aAddr, bAddr, pc) }},
		{"tcp", "kernel TCP, TCP_NODELAY, blocking echo", func() (*PingResult, error) { return TCPPing(a, b, aAddr, bAddr, pc) }},
	}
	for _, p := range paths {
		if !step(p.path + " round trips") {
			break
		}
		r, err := p.ping()
		if err != nil {
			return fmt.Errorf("%s round trips: %w", p.path, err)
		}
		if r.Histogram().TotalCount() == 0 {
			return fmt.Errorf("%s round trips: all %d lost", p.path, r.Lost)
		}
		t.hists[p.path] = r.Histogram()
		t.RTT = append(t.RTT, RTTRow{Path: p.path, What: p.what, Count: r.Count, Size: r.Size, Lost: r.Lost, RTT: r.RTT})
	}
	if len(t.RTT) < 2 {
		return nil // interrupted before the ratios' references
	}
	raw, ssam := t.RTT[0].RTT, t.RTT[1].RTT
	for i := range t.RTT {
		r := &t.RTT[i]
		r.P50VsRaw = ratio(r.RTT.P50, raw.P50)
		r.P99VsRaw = ratio(r.RTT.P99, raw.P99)
		r.P50VsSSAM = ratio(r.RTT.P50, ssam.P50)
		r.P99VsSSAM = ratio(r.RTT.P99, ssam.P99)
	}
	return nil
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return roundTo(float64(a)/float64(b), 3)
}

// bandwidth measures part 4's bandwidth.
func (t *SSAMTables) bandwidth(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg SSAMTablesConfig, step func(string) bool) error {
	if !step("SSAM bulk write") {
		return nil
	}
	sb, err := SSAMBulk(a, b, cfg.Bulk, cfg.BulkMessage, cfg.Mode, ssam.Config{})
	if err != nil {
		return fmt.Errorf("SSAM bulk write: %w", err)
	}
	if !step("TCP stream") {
		return nil
	}
	tb, err := TCPStream(a, b, aAddr, bAddr, cfg.Bulk, cfg.BulkMessage)
	if err != nil {
		return fmt.Errorf("TCP stream: %w", err)
	}
	if !step("UDP blast") {
		return nil
	}
	ub, err := UDPBlast(a, b, aAddr, bAddr, cfg.Bulk, cfg.BulkMessage)
	if err != nil {
		return fmt.Errorf("UDP blast: %w", err)
	}
	row := func(r *BulkResult, what string) BandwidthRow {
		return BandwidthRow{Path: r.API, What: what, Bytes: r.Bytes, Message: r.Message, Seconds: r.Seconds,
			MBPerSec: roundTo(r.MBPerSec, 2), VsSSAM: roundTo(r.MBPerSec/sb.MBPerSec, 3)}
	}
	u := row(&ub.BulkResult, "kernel UDP datagrams sent back to back; goodput at the receiver")
	u.Sent, u.Received, u.Loss = ub.Sent, ub.Received, ub.Loss
	t.Bandwidth = []BandwidthRow{
		row(sb, "SSAM bulk write: AAL5 requests pipelined through the window, acked explicitly"),
		row(tb, "kernel TCP stream of the same bytes"),
		u,
	}
	return nil
}

// Ports of the kernel-socket benchmarks (UDPPing uses 7088).
const (
	tcpPingPort   = 7089
	udpBlastPort  = 7090
	tcpStreamPort = 7091
)

// tcpPair connects a to a listener at bAddr:port in b's namespace and
// returns both ends, with TCP_NODELAY.
func tcpPair(a, b datapath.Place, bAddr netip.Addr, port int) (ca, cb *net.TCPConn, err error) {
	var ln *net.TCPListener
	if err := b.Do(func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: bAddr.AsSlice(), Port: port})
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("tcp listener: %w", err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		var err error
		cb, err = ln.AcceptTCP()
		accepted <- err
	}()
	err = a.Do(func() (err error) {
		ca, err = net.DialTCP("tcp4", nil, &net.TCPAddr{IP: bAddr.AsSlice(), Port: port})
		return err
	})
	if err != nil {
		ln.Close() // ends the accept
		<-accepted
		if cb != nil {
			cb.Close()
		}
		return nil, nil, fmt.Errorf("tcp dial: %w", err)
	}
	if err := <-accepted; err != nil {
		ca.Close()
		return nil, nil, fmt.Errorf("tcp accept: %w", err)
	}
	for _, c := range []*net.TCPConn{ca, cb} {
		if err := c.SetNoDelay(true); err != nil {
			ca.Close()
			cb.Close()
			return nil, nil, err
		}
	}
	return ca, cb, nil
}

// TCPPing runs a ping-pong of size-byte messages (at least 8) from a to b
// over a kernel TCP connection with TCP_NODELAY, b echoing each message
// with blocking reads, as UDPPing does with datagrams.
func TCPPing(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	size := max(cfg.Size, 8)
	ca, cb, err := tcpPair(a, b, bAddr, tcpPingPort)
	if err != nil {
		return nil, err
	}
	defer ca.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(cb, buf); err != nil {
				return // closed
			}
			if _, err := cb.Write(buf); err != nil {
				return
			}
		}
	})
	defer wg.Wait()
	defer cb.Close()

	r := cfg.newResult("tcp", size)
	msg := make([]byte, size)
	buf := make([]byte, size)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		start := time.Now()
		ca.SetReadDeadline(start.Add(cfg.Timeout))
		if _, err := ca.Write(msg); err != nil {
			return nil, err
		}
		got := false
		for !got {
			_, err := io.ReadFull(ca, buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return nil, err
			}
			got = binary.BigEndian.Uint64(buf) == uint64(i) // an older, late echo is skipped
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}

// TCPStream sends total bytes from a to b over a kernel TCP connection in
// writes of msg bytes; the rate counts from the first write until b has
// read the last byte.
func TCPStream(a, b datapath.Place, aAddr, bAddr netip.Addr, total int64, msg int) (*BulkResult, error) {
	if msg < 1 || total < 1 {
		return nil, fmt.Errorf("bench: TCP stream of %d bytes in %d-byte writes", total, msg)
	}
	ca, cb, err := tcpPair(a, b, bAddr, tcpStreamPort)
	if err != nil {
		return nil, err
	}
	defer ca.Close()
	defer cb.Close()
	type result struct {
		n   int64
		end time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, 256<<10)
		var n int64
		for n < total {
			k, err := cb.Read(buf)
			n += int64(k)
			if err != nil {
				done <- result{n, time.Now(), err}
				return
			}
		}
		done <- result{n, time.Now(), nil}
	}()
	data := make([]byte, msg)
	start := time.Now()
	var werr error
	for sent := int64(0); sent < total && werr == nil; {
		k := int(min(int64(msg), total-sent))
		_, werr = ca.Write(data[:k])
		sent += int64(k)
	}
	if werr != nil {
		cb.Close() // ends the reader
	}
	r := <-done
	if err := errors.Join(werr, r.err); err != nil {
		return nil, err
	}
	secs := r.end.Sub(start).Seconds()
	return &BulkResult{API: "tcp", Bytes: r.n, Message: msg, Seconds: secs, MBPerSec: float64(r.n) / secs / 1e6}, nil
}

// BlastResult is the outcome of UDPBlast: the rate counts the bytes that
// arrived.
type BlastResult struct {
	BulkResult
	Sent     int     `json:"datagrams_sent"`
	Received int     `json:"datagrams_received"`
	Loss     float64 `json:"loss"`
}

// udpRcvBuf is the receive buffer asked for the blast's receiving socket
// (as the AF_PACKET path asks for its own).
const udpRcvBuf = 4 << 20

// UDPBlast sends total bytes from a to b as datagrams of msg bytes, back to
// back with no flow control, and counts at b what arrives: the rate is the
// bytes received over the time from the first send to the last arrival.
// The receiver stops when every datagram has arrived, or 200 ms after the
// last one did.
func UDPBlast(a, b datapath.Place, aAddr, bAddr netip.Addr, total int64, msg int) (*BlastResult, error) {
	if msg < 1 || msg > maxDatagram || total < 1 {
		return nil, fmt.Errorf("bench: UDP blast of %d bytes in %d-byte datagrams", total, msg)
	}
	var ca, cb *net.UDPConn
	if err := b.Do(func() (err error) {
		cb, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bAddr.AsSlice(), Port: udpBlastPort})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp receiving socket: %w", err)
	}
	defer cb.Close()
	cb.SetReadBuffer(udpRcvBuf)
	if raw, err := cb.SyscallConn(); err == nil { // beyond rmem_max, with CAP_NET_ADMIN
		raw.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, udpRcvBuf)
		})
	}
	if err := a.Do(func() (err error) {
		ca, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: bAddr.AsSlice(), Port: udpBlastPort})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp sending socket: %w", err)
	}
	defer ca.Close()
	datagrams := int((total + int64(msg) - 1) / int64(msg))
	type result struct {
		n     int64
		count int
		last  time.Time
		err   error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, maxDatagram)
		var r result
		for r.count < datagrams {
			cb.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			k, err := cb.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				r.err = err
				break
			}
			r.n += int64(k)
			r.count++
			r.last = time.Now()
		}
		done <- r
	}()
	data := make([]byte, msg)
	start := time.Now()
	var werr error
	for sent := int64(0); sent < total; {
		k := int(min(int64(msg), total-sent))
		if _, err := ca.Write(data[:k]); err != nil {
			var errno syscall.Errno
			if !errors.As(err, &errno) || errno != syscall.ENOBUFS && errno != syscall.ECONNREFUSED {
				werr = err
				break
			}
		}
		sent += int64(k)
	}
	r := <-done
	if err := errors.Join(werr, r.err); err != nil {
		return nil, err
	}
	if r.count == 0 {
		return nil, fmt.Errorf("bench: none of %d datagrams arrived", datagrams)
	}
	secs := r.last.Sub(start).Seconds()
	return &BlastResult{
		BulkResult: BulkResult{API: "udp", Bytes: r.n, Message: msg, Seconds: secs, MBPerSec: float64(r.n) / secs / 1e6},
		Sent:       datagrams, Received: r.count, Loss: 1 - float64(r.count)/float64(datagrams),
	}, nil
}

// Markdown writes the tables as Markdown, one table per part.
func (t *SSAMTables) Markdown(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# SSAM's tables, measured today\n\n")
	if t.Interrupted {
		p("**Interrupted**: the tables hold what was measured before the run was stopped.\n\n")
	}
	var where []string
	if t.Setup.Lab != "" {
		where = append(where, t.Setup.Lab)
	}
	if t.Setup.Kernel != "" {
		where = append(where, "Linux "+t.Setup.Kernel)
	}
	if t.Setup.CPUs > 0 {
		where = append(where, fmt.Sprintf("%d CPUs", t.Setup.CPUs))
	}
	if len(where) > 0 {
		p("Measured in one run on %s. ", strings.Join(where, ", "))
	}
	p("Costs are means over rounds of calls timed together (%d calls each). For context, SSAM (1994): %s.\n\n",
		t.Count, t.Paper.Setup)

	p("## 1. Trap costs over AF_XDP\n\n")
	costTable(&b, t.Traps, nil)
	p("\nAF_XDP on veth works in copy mode: a send's sendto(2) runs the kernel's transmit and the peer's XDP and receive copy before it returns.\n\n")

	p("## 2. The same calls through system calls (AF_PACKET, one per cell)\n\n")
	costTable(&b, t.Syscalls, t.Traps)

	p("\n## 3. Active Messages over AF_XDP\n\n")
	p("| operation | ns | what |\n|---|--:|---|\n")
	for _, c := range t.AM {
		p("| %s | %s | %s |\n", c.Op, ns(c.NsPerCall), c.What)
	}
	p("\nMeans over %d requests per kind, in rounds of a full window (%d); the clock bracket subtracted from Token.Reply costs %s ns.\n\n",
		amCalls(t.AM), amWindow, ns(t.ClockNs))

	p("## 4. Round trip and bandwidth on the same lab\n\n")
	p("| path | p50 (µs) | p99 (µs) | p50 / raw | p99 / raw | p50 / SSAM | p99 / SSAM | lost | what |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range t.RTT {
		p("| %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", r.Path, us(r.RTT.P50), us(r.RTT.P99),
			times(r.P50VsRaw), times(r.P99VsRaw), times(r.P50VsSSAM), times(r.P99VsSSAM), r.Lost, r.What)
	}
	p("| SSAM 1994 | ~%g | | | | | | | the paper: application to application, small messages |\n", t.Paper.RTTMicros)
	size, count := 0, 0
	if len(t.RTT) > 0 {
		size, count = t.RTT[0].Size, t.RTT[0].Count
	}
	p("\n%d-byte messages, %d round trips per path.\n\n", size, count)
	p("| path | MB/s | / SSAM | bytes delivered | message (bytes) | seconds | loss | what |\n")
	p("|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range t.Bandwidth {
		loss := ""
		if r.Sent > 0 {
			loss = fmt.Sprintf("%.2f%% of %d", 100*r.Loss, r.Sent)
		}
		p("| %s | %.1f | %s | %d | %d | %.3f | %s | %s |\n", r.Path, r.MBPerSec, times(r.VsSSAM), r.Bytes, r.Message, r.Seconds, loss, r.What)
	}
	p("| SSAM 1994 | ~%g | | | | | | the paper: bulk transfer |\n", t.Paper.BulkMBPerSec)

	m := t.Memory
	p("\n## Memory pinned per peer\n\n")
	p("| what | bytes | KiB |\n|---|--:|--:|\n")
	p("| SSAM device with one peer (window %d, %d-byte messages): %d send slots, %d receive cells, and the device's transmit frames | %d | %.0f |\n",
		m.Window, m.MaxMessage, m.SendSlots, m.RecvSlots, m.PinnedBytes, float64(m.PinnedBytes)/1024)
	p("| each further peer: its send area and receive ring | %d | %.0f |\n", m.PerPeerBytes, float64(m.PerPeerBytes)/1024)
	if t.Retransmits > 0 {
		p("\nSSAM retransmitted %d requests during the run.\n", t.Retransmits)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// costTable writes a table of costs; with base, a column of ratios to the
// base cost of the same operation.
func costTable(b *strings.Builder, costs, base []Cost) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if base == nil {
		p("| operation | ns per call | cells | ns per cell | what |\n|---|--:|--:|--:|---|\n")
	} else {
		p("| operation | ns per call | cells | ns per cell | / AF_XDP | system calls | what |\n|---|--:|--:|--:|--:|--:|---|\n")
	}
	for _, c := range costs {
		cells, perCell := "", ""
		if c.Cells > 0 {
			cells, perCell = fmt.Sprint(c.Cells), ns(c.NsPerCell)
		}
		what := c.What
		if c.EmptyReceives > 0 {
			what += fmt.Sprintf(" (%d empty receives)", c.EmptyReceives)
		}
		if base == nil {
			p("| %s | %s | %s | %s | %s |\n", c.Op, ns(c.NsPerCall), cells, perCell, what)
			continue
		}
		vs, sys := "", ""
		for _, o := range base {
			if o.Op == c.Op && o.NsPerCall > 0 && c.Op != "null_syscall" {
				vs = times(c.NsPerCall / o.NsPerCall)
			}
		}
		if c.Syscalls > 0 {
			sys = fmt.Sprint(c.Syscalls)
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", c.Op, ns(c.NsPerCall), cells, perCell, vs, sys, what)
	}
}

func amCalls(costs []Cost) int {
	for _, c := range costs {
		if c.Op == "handle_request_reply" {
			return c.Calls
		}
	}
	return 0
}

func ns(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func us(v int64) string { return fmt.Sprintf("%.1f", float64(v)/1e3) }

func times(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", v)
}
