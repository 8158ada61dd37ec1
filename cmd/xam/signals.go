package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// errInterrupted marks a run that SIGINT or SIGTERM stopped: what it had
// measured is printed, and xam exits with 130.
var errInterrupted = errors.New("interrupted")

// exitInterrupted is the exit status of an interrupted run (128+SIGINT,
// as shells report it).
const exitInterrupted = 130

// interruptGrace is how long a command has, after the first signal, to
// stop its measurement, print what it has, remove its lab and return.
const interruptGrace = 3 * time.Second

// interrupts turns SIGINT and SIGTERM into a stop flag for a command that
// builds a lab and measures on it. The first signal sets the flag (the
// measurements check it between round trips and return what they have);
// the command then prints, removes its lab on its way out and returns
// errInterrupted. If it has not returned within interruptGrace, or a
// second signal comes, the cleanups registered with it (removing the lab)
// run here and xam exits at once: a run never leaves its lab behind.
type interrupts struct {
	e     *env
	note  string        // what the first signal's message says happens next
	grace time.Duration // how long after the first signal before exiting at once
	stop  atomic.Bool
	sig   chan os.Signal
	done  chan struct{}

	mu       sync.Mutex
	cleanups []func() error
	exiting  bool
}

// watchInterrupts starts watching for signals until release. note says,
// after the first signal, what happens next.
func watchInterrupts(e *env, note string) *interrupts {
	in := &interrupts{e: e, note: note, grace: interruptGrace, sig: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(in.sig, os.Interrupt, syscall.SIGTERM)
	go in.watch()
	return in
}

func (in *interrupts) watch() {
	var grace <-chan time.Time
	for {
		select {
		case s := <-in.sig:
			if !in.stop.Load() {
				in.stop.Store(true)
				fmt.Fprintf(in.e.stderr, "xam: %v: stopping; %s (again to stop at once)\n", s, in.note)
				grace = time.After(in.grace)
				continue
			}
			in.exitNow()
		case <-grace:
			in.exitNow()
		case <-in.done:
			return
		}
	}
}

// exitNow runs the cleanups and exits.
func (in *interrupts) exitNow() {
	in.mu.Lock()
	if in.exiting {
		in.mu.Unlock()
		return
	}
	in.exiting = true
	cleanups := in.cleanups
	in.mu.Unlock()
	var errs []error
	for i := len(cleanups) - 1; i >= 0; i-- {
		errs = append(errs, cleanups[i]())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(in.e.stderr, "xam: stopped at once; cleaning up: %v\n", err)
	} else {
		fmt.Fprintln(in.e.stderr, "xam: stopped at once; the lab is removed")
	}
	os.Exit(exitInterrupted)
}

// onExit registers a cleanup (removing a lab) for an exit at once. The
// command still runs it itself on its way out.
func (in *interrupts) onExit(f func() error) {
	in.mu.Lock()
	in.cleanups = append(in.cleanups, f)
	in.mu.Unlock()
}

// flag returns the stop flag, for bench.PingConfig.Stop.
func (in *interrupts) flag() *atomic.Bool { return &in.stop }

// interrupted reports whether a signal came.
func (in *interrupts) interrupted() bool { return in.stop.Load() }

// release stops watching.
func (in *interrupts) release() {
	signal.Stop(in.sig)
	close(in.done)
}
