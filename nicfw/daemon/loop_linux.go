//go:build linux

package daemon

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// The engine loop: one thread runs the engines of one or more daemons in
// turns, with the work that connections queue for them (do); while none
// has work it yields the processor between turns (endpoint.Yield), and
// once none has had work for Config.Sleep it sleeps in poll(2).

// Run runs the engine loop in the calling goroutine, locked to its thread
// and pinned to the configured cores, and serves the socket, until ctx is
// done. It then closes every connection and endpoint and returns ctx's
// error, or the link's error that stopped it.
func (d *Daemon) Run(ctx context.Context) error { return RunGroup(ctx, d) }

// RunGroup runs the engines of several daemons in one thread, as one NIC
// processor serves several ports: each daemon keeps its own link, engine,
// socket and endpoints, and the thread runs their engines in turns and
// sleeps on all of them at once. On a machine with few cores it saves the
// hand-offs between engine threads (a lab of several hosts on one
// machine); the thread is pinned to the first daemon's Config.Cores. It
// returns when ctx is done (ctx.Err()) or an engine fails, and the
// daemons are then stopped, as Run stops one.
func RunGroup(ctx context.Context, ds ...*Daemon) error {
	if len(ds) == 0 {
		return fmt.Errorf("%w: no daemons", nicfw.ErrConfig)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The engine thread holds one of Go's processors (Ps) while it polls:
	// give the rest of the program another for as long as it runs, or on a
	// machine of two cores a second engine thread leaves none to the
	// applications of the same process.
	growProcs(1)
	defer growProcs(-1)
	if cores := ds[0].cfg.Cores; len(cores) > 0 {
		var set, old unix.CPUSet
		for _, c := range cores {
			set.Set(c)
		}
		err := unix.SchedGetaffinity(0, &old)
		if err == nil {
			err = unix.SchedSetaffinity(0, &set)
		}
		if err == nil {
			// The thread goes back to Go's scheduler when the loop
			// returns: with its old mask, or whatever runs on it next
			// (another daemon's New, checking its cores against this
			// thread's mask, say) would be held to these cores.
			defer unix.SchedSetaffinity(0, &old)
		}
		if err != nil {
			for _, d := range ds {
				d.shutdown() // the socket, its file and the endpoints go
			}
			return fmt.Errorf("nicfw: pinning the engine to CPUs %v: %w", cores, err)
		}
	}
	for _, d := range ds {
		if d.ln != nil {
			d.wg.Go(d.accept)
		}
		stop := context.AfterFunc(ctx, func() { d.kick() })
		defer stop()
		d.log.Info("engine running", "cores", ds[0].cfg.Cores, "sleep", d.cfg.Sleep, "socket", d.cfg.Socket, "group", len(ds))
	}
	err := loopAll(ctx, ds)
	for _, d := range ds {
		d.shutdown()
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// procsMu serializes the changes of GOMAXPROCS by engine loops.
var procsMu sync.Mutex

// growProcs adds n to GOMAXPROCS.
func growProcs(n int) {
	procsMu.Lock()
	defer procsMu.Unlock()
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)+n))
}

// loop is the engine loop.
func (d *Daemon) loop(ctx context.Context) error {
	return loopAll(ctx, []*Daemon{d})
}

// loopAll runs the engines of ds in turns in this thread until ctx is done:
// each turn runs each daemon's queued work and its engine once; a turn
// without work yields the processor (endpoint.Yielder: at every idle turn
// while other threads want this core, else every endpoint.YieldEvery from
// the first turn without work),
// and after Config.Sleep (the shortest of ds's) without work in any, it
// sleeps (sleepAll); woken, it sleeps again after the first turn without
// work. With BusyPoll (if any of ds has it) it neither yields nor sleeps.
func loopAll(ctx context.Context, ds []*Daemon) error {
	nap := ds[0].cfg.Sleep
	for _, d := range ds[1:] {
		nap = min(nap, d.cfg.Sleep)
	}
	var idleSince time.Time
	var y endpoint.Yielder
	for iter := 0; ; iter++ {
		work := 0
		for _, d := range ds {
			d.runWork()
			n, err := d.eng.Poll()
			if err != nil {
				return err
			}
			work += n
		}
		if work > 0 {
			idleSince = time.Time{}
			continue
		}
		if iter&255 == 0 && ctx.Err() != nil {
			return nil
		}
		if nap == BusyPoll {
			continue
		}
		now := time.Now()
		if idleSince.IsZero() {
			// The first turn without work: what comes next (the answer to
			// what was just sent, the application's next message) comes
			// soonest now.
			y.Restart(now)
			idleSince = now
			continue
		}
		if y.Due(now) {
			y.Yield(now)
			now = time.Now()
		}
		if now.Sub(idleSince) < nap {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := sleepAll(ds); err != nil {
			return err
		}
		// Idle for Sleep already: a turn that finds no work sleeps again at
		// once, so that waking for a timer or a nap (a link without a
		// descriptor to sleep on) costs one turn, not Sleep's polling.
		idleSince = time.Now().Add(-nap)
	}
}

// sleep marks the endpoints idle, checks once more for work and sleeps in
// poll(2) until a frame, a kick or the timer scan.
func (d *Daemon) sleep() error {
	return sleepAll([]*Daemon{d})
}

// sleepAll marks every endpoint of ds's engines idle, looks once more for
// work and sleeps in poll(2) on all their wake eventfds and links until a
// frame, a kick, a control request or the first timer.
func sleepAll(ds []*Daemon) error {
	for _, d := range ds {
		if err := d.eng.SetIdle(true); err != nil {
			return err
		}
		defer d.eng.SetIdle(false)
	}
	// A descriptor published before the idle mark was visible did not
	// kick: look once more now that it is.
	for _, d := range ds {
		if n, err := d.eng.Poll(); err != nil || n > 0 || len(d.work) > 0 {
			return err
		}
	}
	timeout := -1
	earlier := func(ms int) {
		if timeout < 0 || ms < timeout {
			timeout = ms
		}
	}
	var fds []unix.PollFd
	for _, d := range ds {
		if d.eng.Busy() {
			earlier(max(int(d.eng.TimerPeriod()/time.Millisecond), 1))
		}
		if at, ok := d.eng.NextTimer(); ok {
			// Wake for the modules' timers (the mapper's next probe; its
			// frames wake us anyway).
			earlier(max(int(time.Until(at)/time.Millisecond), 1))
		}
		d.sleeps++
		fds = append(fds, unix.PollFd{Fd: int32(d.wake), Events: unix.POLLIN})
		if f, ok := d.link.(interface{ FDs() []int }); ok {
			for _, fd := range f.FDs() { // a link over several queues (afxdp.Queues)
				fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			}
		} else if f, ok := d.link.(afxdp.FDer); ok {
			fds = append(fds, unix.PollFd{Fd: int32(f.FD()), Events: unix.POLLIN})
		} else {
			earlier(1) // a link without a descriptor: nap briefly
		}
	}
	if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
		return fmt.Errorf("nicfw: daemon poll: %w", err)
	}
	var b [8]byte
	for _, d := range ds {
		unix.Read(d.wake, b[:]) // reset the counter; EAGAIN when it was not written
	}
	return nil
}

// kick wakes the engine if it sleeps.
func (d *Daemon) kick() {
	one := [8]byte{1}
	unix.Write(d.wake, one[:])
}

// do runs f in the engine goroutine and waits for it.
func (d *Daemon) do(f func()) error {
	ran := make(chan struct{})
	select {
	case d.work <- func() { f(); close(ran) }:
	case <-d.done:
		return ErrClosed
	}
	d.kick()
	select {
	case <-ran:
		return nil
	case <-d.done:
		return ErrClosed
	}
}

// runWork runs the functions queued by connections.
func (d *Daemon) runWork() {
	for {
		select {
		case f := <-d.work:
			f()
		default:
			return
		}
	}
}
