//go:build linux

package endpoint

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkHandoffs is the floor that a round trip's hand-offs between
// polling threads set, with no work at all between them: threads (each a
// goroutine locked to a thread of its own, as an engine loop or a waiting
// application is) pass a turn along a round trip's chain of hand-offs,
// each looking for its turn in a loop that yields as the engine loop and
// the waits do (Yielder). One op is one round trip:
//
//   - inline: A -> B -> A, two applications, each running its own engine;
//   - group: A -> E -> B -> E -> A, both hosts' engines in one thread;
//   - daemons: A -> dA -> dB -> B -> dB -> dA -> A, an engine per host.
//
// On a machine with a core per thread a hand-off is a cache line's trip
// between cores (0.15-0.2 µs); with more threads than cores each waits
// for the scheduler to give its thread the core (firmware mode on two
// CPUs, docs/firmware.md): that wait is the part of the firmware round
// trip that no engine or application code can take away. The ",block"
// cases pass the turn through eventfds instead, each thread asleep in
// read(2) until its turn: the floor of waits that block at once.
func BenchmarkHandoffs(b *testing.B) {
	for _, c := range []struct {
		name  string
		chain []int // the thread of each step of a round trip
	}{
		{"inline", []int{0, 1}},
		{"group", []int{0, 1, 2, 1}},
		{"daemons", []int{0, 1, 2, 3, 2, 1}},
	} {
		b.Run(c.name, func(b *testing.B) { handoffs(b, c.chain) })
		b.Run(c.name+",block", func(b *testing.B) { blockingHandoffs(b, c.chain) })
	}
}

// blockingHandoffs is handoffs with each thread asleep on an eventfd of
// its own until its turn, the one before it waking it.
func blockingHandoffs(b *testing.B, chain []int) {
	threads := chainThreads(b, chain)
	fds := make([]int, threads)
	for i := range fds {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			b.Fatal(err)
		}
		fds[i] = fd
		defer unix.Close(fd)
	}
	steps := len(chain)
	total := b.N * steps
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	runThreads(b, threads, func(t int) {
		var buf [8]byte
		for v := 0; v < total; v++ {
			if chain[v%steps] != t {
				continue
			}
			if v > 0 {
				if _, err := unix.Read(fds[t], buf[:]); err != nil {
					b.Error(err)
					return
				}
			}
			if v+1 < total {
				unix.Write(fds[chain[(v+1)%steps]], one)
			}
		}
	})
}

// handoffs runs b.N round trips of chain's hand-offs.
func handoffs(b *testing.B, chain []int) {
	threads := chainThreads(b, chain)
	steps := uint64(len(chain))
	total := uint64(b.N) * steps
	var turn atomic.Uint64 // the steps taken
	runThreads(b, threads, func(t int) {
		var y Yielder
		waiting := false
		for {
			v := turn.Load()
			if v >= total {
				return
			}
			if chain[v%steps] == t {
				turn.Store(v + 1)
				waiting = false
				continue
			}
			now := time.Now()
			if !waiting {
				y.Restart(now)
				waiting = true
			} else if y.Due(now) {
				y.Yield(now)
			}
		}
	})
}

// chainThreads returns the number of threads of chain, and gives the
// program a Go processor for each of them, as if each were a process of
// its own (a daemon), and one for the rest, until b ends.
func chainThreads(b *testing.B, chain []int) int {
	threads := 0
	for _, t := range chain {
		threads = max(threads, t+1)
	}
	old := runtime.GOMAXPROCS(threads + 1)
	b.Cleanup(func() { runtime.GOMAXPROCS(old) })
	return threads
}

// runThreads restarts b's timer and runs step(t) for each of threads
// threads, each in a goroutine locked to a thread of its own, until all
// return.
func runThreads(b *testing.B, threads int, step func(t int)) {
	var wg sync.WaitGroup
	b.ResetTimer()
	for t := range threads {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			step(t)
		})
	}
	wg.Wait()
}
