package bench

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/loader"
)

// Parts 1 to 3 of SSAM's tables (see ssamtables.go for the whole, and for
// how costs are timed): the costs of the SSAM device's calls over AF_XDP
// and AF_PACKET, what the device pins, and the costs of the Active
// Messages layer.

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
func nullSyscall(n int) costRow {
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
			return fmt.Errorf("%d of %d frames reached the socket in 2 s", n-mark, frames)
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
		err = errors.New("no frame reached the AF_PACKET socket in 2 s")
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
func trapCosts(tx, rx *driver.Device, arr arrivals, ops int, syscalls bool) ([]costRow, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tb, err := newTrapBench(tx, rx, arr, ops, syscalls)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	if err := tb.sends(); err != nil {
		return nil, err
	}
	if err := tb.receives(); err != nil {
		return nil, err
	}
	if err := tb.sendRecv(); err != nil {
		return nil, err
	}
	return tb.out, nil
}

// trapBench is what trapCosts keeps from one measurement to the next: the
// devices, the slot of the send area the next send starts at, the receive
// calls that found nothing, and the costs measured so far.
type trapBench struct {
	tx, rx   *driver.Device
	arr      arrivals
	ops      int  // calls timed per cost
	syscalls bool // the system-call path: a cost counts its system calls
	mask     int  // slots in a send area, less one (a power of two)
	off      int  // the slot the next send starts at
	empty    int  // receive calls that found nothing since the last cost
	out      []costRow
}

// newTrapBench checks that tx and rx have send areas of the same size, of
// at least 16 slots, and fills them with a pattern that tells the two
// apart.
func newTrapBench(tx, rx *driver.Device, arr arrivals, ops int, syscalls bool) (*trapBench, error) {
	mask := len(tx.SendArea(0))/cells.PayloadSize - 1
	if mask < 15 || len(rx.SendArea(0)) != len(tx.SendArea(0)) {
		return nil, fmt.Errorf("send areas of %d and %d bytes", len(tx.SendArea(0)), len(rx.SendArea(0)))
	}
	for i, area := range [][]byte{tx.SendArea(0), rx.SendArea(0)} {
		for j := range area {
			area[j] = byte(i + j)
		}
	}
	return &trapBench{tx: tx, rx: rx, arr: arr, ops: ops, syscalls: syscalls, mask: mask}, nil
}

// next returns the slot n cells are sent from, and moves on past them,
// wrapping around the send area.
func (tb *trapBench) next(n int) int {
	o := tb.off
	tb.off = (tb.off + n) & tb.mask
	return o
}

// recvN receives until d has delivered want cells (got already).
func (tb *trapBench) recvN(d *driver.Device, got, want int) error {
	var since time.Time
	for tries := 1; got < want; tries++ {
		n, err := d.Recv(want - got)
		if err != nil {
			return err
		}
		if n == 0 {
			tb.empty++
			if tries&1023 == 0 {
				if since.IsZero() {
					since = time.Now()
				} else if time.Since(since) > 2*time.Second {
					return fmt.Errorf("%d of %d cells arrived", got, want)
				}
			}
		}
		got += n
	}
	return nil
}

// takeCells takes n received cells from d's connection 0.
func takeCells(d *driver.Device, n int) error {
	for range n {
		if _, ok := d.Take(0); !ok {
			return errors.New("a received cell is not in the ring")
		}
	}
	return nil
}

// send sends k batches of n cells from d, and waits until their frames
// have reached peer.
func (tb *trapBench) send(d, peer *driver.Device, k, n int) error {
	if err := drainDevice(peer); err != nil {
		return err
	}
	m, err := tb.arr.mark(peer)
	if err != nil {
		return err
	}
	for range k {
		if n == 1 {
			err = d.Send(0, tb.next(1), driver.EOM)
		} else {
			err = d.SendBatch(0, tb.next(n), n, driver.EOM)
		}
		if err != nil {
			return err
		}
	}
	perBatch := (n + d.CellsPerFrame() - 1) / d.CellsPerFrame()
	return tb.arr.wait(peer, m, uint64(k*perBatch))
}

// add records a cost of tb.ops calls that took total; sys is the system
// calls one call makes on the system-call path. The receive calls that
// found nothing go with it.
func (tb *trapBench) add(op, what string, total time.Duration, cellsPerCall, sys int) {
	c := newCost(op, what, tb.ops, total, cellsPerCall)
	if tb.syscalls {
		c.Syscalls = sys
	}
	c.EmptyReceives, tb.empty = tb.empty, 0
	tb.out = append(tb.out, c)
}

// per16 is the frames sixteen cells from tx take.
func (tb *trapBench) per16() int {
	return (16 + tb.tx.CellsPerFrame() - 1) / tb.tx.CellsPerFrame()
}

// sends times Send of one cell and SendBatch of sixteen, rx drained
// between rounds so that its ring never overflows.
func (tb *trapBench) sends() error {
	tx, rx := tb.tx, tb.rx
	total, err := timeRounds(tb.ops, 256, func(int) error { return drainDevice(rx) }, func() error {
		return tx.Send(0, tb.next(1), driver.EOM)
	})
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	tb.add("send", "Send: one cell from the send area, in a frame of its own", total, 1, 1)

	per16 := tb.per16()
	total, err = timeRounds(tb.ops, 32, func(int) error { return drainDevice(rx) }, func() error {
		return tx.SendBatch(0, tb.next(16), 16, driver.EOM)
	})
	if err != nil {
		return fmt.Errorf("send 16: %w", err)
	}
	tb.add("send16", fmt.Sprintf("SendBatch(16): 16 cells from the send area, in %d frame(s)", per16), total, 16, per16)
	return nil
}

// receives times Recv and Take of one cell and of sixteen, each round's
// cells sent and arrived before it starts.
func (tb *trapBench) receives() error {
	tx, rx := tb.tx, tb.rx
	total, err := timeRounds(tb.ops, 256, func(k int) error { return tb.send(tx, rx, k, 1) }, func() error {
		if err := tb.recvN(rx, 0, 1); err != nil {
			return err
		}
		return takeCells(rx, 1)
	})
	if err != nil {
		return fmt.Errorf("receive 1: %w", err)
	}
	tb.add("recv1", "Recv(1) + Take: one cell that came in a frame of its own", total, 1, 1)

	per16 := tb.per16()
	total, err = timeRounds(tb.ops, 64, func(k int) error { return tb.send(tx, rx, k, 16) }, func() error {
		if err := tb.recvN(rx, 0, 16); err != nil {
			return err
		}
		return takeCells(rx, 16)
	})
	if err != nil {
		return fmt.Errorf("receive 16: %w", err)
	}
	tb.add("recv16", fmt.Sprintf("Recv(16) + 16 Take: 16 cells that came in %d frame(s)", per16), total, 16, per16)
	return nil
}

// sendRecv times SendRecv: tx sends a cell and receives one that rx sent
// before the round.
func (tb *trapBench) sendRecv() error {
	tx, rx := tb.tx, tb.rx
	total, err := timeRounds(tb.ops, 256, func(k int) error {
		if err := drainDevice(rx); err != nil {
			return err
		}
		return tb.send(rx, tx, k, 1)
	}, func() error {
		n, err := tx.SendRecv(0, tb.next(1), driver.EOM, 1)
		if err != nil {
			return err
		}
		if err := tb.recvN(tx, n, 1); err != nil {
			return err
		}
		return takeCells(tx, 1)
	})
	if err != nil {
		return fmt.Errorf("send-receive: %w", err)
	}
	tb.add("sendrecv", "SendRecv(1) + Take: send a cell, receive one waiting", total, 1, 2)
	return nil
}

// xdpTraps measures part 1 on the SSAM devices of two SSAM endpoints at
// their defaults, and what those devices pin.
func xdpTraps(a, b datapath.Place, cfg ssamTablesConfig) ([]costRow, ssamMemory, error) {
	ea, err := OpenSSAM(a, b.MAC, cfg.Mode, ssam.Config{})
	if err != nil {
		return nil, ssamMemory{}, fmt.Errorf("SSAM endpoint A: %w", err)
	}
	defer ea.Close()
	eb, err := OpenSSAM(b, a.MAC, cfg.Mode, ssam.Config{})
	if err != nil {
		return nil, ssamMemory{}, fmt.Errorf("SSAM endpoint B: %w", err)
	}
	defer eb.Close()
	mem, err := pinned(ea)
	if err != nil {
		return nil, ssamMemory{}, fmt.Errorf("pinned memory: %w", err)
	}
	costs := []costRow{nullSyscall(max(10*cfg.Count, 100000))}
	more, err := trapCosts(ea.AM.Device(), eb.AM.Device(), xdpArrivals{ea.AM.Device(): ea.Raw.Prog, eb.AM.Device(): eb.Raw.Prog}, cfg.Count, false)
	if err != nil {
		return nil, ssamMemory{}, err
	}
	return append(costs, more...), mem, nil
}

// pinned reports what e's device pins, and what one more peer would add
// (measured on devices with one and two connections over an in-memory
// link of the same MTU).
func pinned(e *SSAMEndpoint) (ssamMemory, error) {
	c := e.AM.Config()
	m := ssamMemory{
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
			v := uint16(ssamVCI + 2*i)
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
func packetTraps(a, b datapath.Place, cfg ssamTablesConfig) ([]costRow, error) {
	slots := ssam.SendSlots(8, 8192) // OpenSSAM's default window and message size
	var devs [2]*driver.Device
	for i, s := range []struct{ here, peer datapath.Place }{{a, b}, {b, a}} {
		err := s.here.Do(func() (err error) {
			devs[i], err = driver.OpenPacket(s.here.Ifindex, driver.Config{
				Conns:     []driver.ConnSpec{{Peer: s.peer.MAC, SendVCI: ssamVCI, RecvVCI: ssamVCI}},
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
func amCosts(a, b datapath.Place, cfg ssamTablesConfig) ([]costRow, float64, uint64, error) {
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

	m := newAMBench(ea, eb)
	if err := syncSSAM(ea, eb); err != nil {
		return nil, 0, 0, err
	}
	rounds := (cfg.Count + amWindow - 1) / amWindow
	if err := m.run(rounds); err != nil {
		return nil, 0, 0, err
	}
	clock := clockBracket(max(cfg.Count, 100000))
	costs, err := m.costs(rounds*amWindow, clock)
	if err != nil {
		return nil, 0, 0, err
	}
	return costs, roundTo(clock, 1), ea.AM.Stats().Retransmits + eb.AM.Stats().Retransmits, nil
}

// amBench is what amCosts keeps across its rounds: the two endpoints, the
// handlers, what the handlers saw, and the time each part of a round took,
// by kind of round.
type amBench struct {
	ea, eb *SSAMEndpoint // requester, responder
	arr    xdpArrivals
	msg    []byte // each request's data
	// b's request handlers, one for each kind of round (it replies, it
	// sends nothing, it replies inside a clock bracket), and a's reply
	// handler.
	replying, silent, bracketed, replyH ssam.HandlerID

	handlerErr         error         // the first error of a handler
	inReply            time.Duration // time inside the Reply brackets
	replies            int           // replies a's handler ran for
	send, handle, back [3]time.Duration
}

// newAMBench registers the handlers of the three kinds of rounds on eb,
// and the reply handler on ea.
func newAMBench(ea, eb *SSAMEndpoint) *amBench {
	m := &amBench{ea: ea, eb: eb, msg: make([]byte, ssamMessage),
		arr: xdpArrivals{ea.AM.Device(): ea.Raw.Prog, eb.AM.Device(): eb.Raw.Prog}}
	m.replying = eb.AM.Register(func(t *ssam.Token, data []byte) {
		if err := t.Reply(m.replyH, data); err != nil && m.handlerErr == nil {
			m.handlerErr = err
		}
	})
	m.silent = eb.AM.Register(func(*ssam.Token, []byte) {})
	m.bracketed = eb.AM.Register(func(t *ssam.Token, data []byte) {
		start := time.Now()
		err := t.Reply(m.replyH, data)
		m.inReply += time.Since(start)
		if err != nil && m.handlerErr == nil {
			m.handlerErr = err
		}
	})
	m.replyH = ea.AM.Register(func(*ssam.Token, []byte) { m.replies++ })
	return m
}

// run runs rounds rounds of each kind, interleaved, and checks that every
// request whose handler replies got its reply.
func (m *amBench) run(rounds int) error {
	runtime.GC()
	for range rounds {
		for kind, h := range []ssam.HandlerID{m.replying, m.silent, m.bracketed} {
			if err := m.round(kind, h); err != nil {
				return err
			}
		}
	}
	if want := 2 * rounds * amWindow; m.replies != want {
		return fmt.Errorf("%d replies handled, want %d", m.replies, want)
	}
	return nil
}

// round runs one round of the given kind, its requests naming handler h,
// and adds the time of its three parts to m.send, m.handle and m.back.
func (m *amBench) round(kind int, h ssam.HandlerID) error {
	const W = amWindow
	ea, eb := m.ea, m.eb
	mb, err := m.arr.mark(eb.AM.Device())
	if err != nil {
		return err
	}
	start := time.Now()
	for range W {
		if err := ea.AM.Request(0, h, m.msg); err != nil {
			return err
		}
	}
	m.send[kind] += time.Since(start)
	if err := m.arr.wait(eb.AM.Device(), mb, W); err != nil {
		return err
	}
	ma, err := m.arr.mark(ea.AM.Device())
	if err != nil {
		return err
	}
	start = time.Now()
	if err := pollUntil(eb, func(n int) bool { return n >= W }); err != nil {
		return err
	}
	m.handle[kind] += time.Since(start)
	if err := m.arr.wait(ea.AM.Device(), ma, W); err != nil {
		return err
	}
	start = time.Now()
	if err := pollUntil(ea, func(int) bool { return ea.AM.Outstanding(0) == 0 }); err != nil {
		return err
	}
	m.back[kind] += time.Since(start)
	return m.handlerErr
}

// pollUntil polls e until done, given the messages handled so far,
// returns true, failing after 2 s.
func pollUntil(e *SSAMEndpoint, done func(handled int) bool) error {
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
				return errors.New("polled for 2 s and the round did not finish")
			}
		}
	}
	return nil
}

// costs turns the rounds' times into the table of part 3: n requests of
// each kind, and clock the cost of an empty clock bracket. It fails when
// a figure that has the bracket subtracted is not positive: the clock
// would then be measuring itself.
func (m *amBench) costs(n int, clock float64) ([]costRow, error) {
	send, handle, back := m.send, m.handle, m.back
	per := func(d time.Duration, calls int) float64 { return float64(d.Nanoseconds()) / float64(calls) }
	cost := func(op, what string, ns float64, calls int) costRow {
		return costRow{Op: op, What: what, Calls: calls, NsPerCall: roundTo(ns, 1)}
	}
	// The brackets cost about one clock read outside what they measure
	// and one inside: take one off each side.
	reply := per(m.inReply, n) - clock
	dispatch := per(handle[2]-m.inReply, n) - clock
	costs := []costRow{
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
		return nil, fmt.Errorf("Token.Reply (%.0f ns) or the rest of the responder's poll (%.0f ns) within the cost of a clock bracket (%.0f ns)",
			reply+clock, dispatch+clock, clock)
	}
	return costs, nil
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
