package amii

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// Waiting: Wait and Drain sleep until a message or an answer is there
// (firmware mode: on the daemon's notification, after spinning a
// while; inline: running the engine), and endpoints shared by several
// goroutines (Config.Shared) take turns.

// Wait waits until a message is in one of the endpoint's receive queues,
// or a request has waited for its reply past Config.ReplyTimeout (its
// return is then due), for at most timeout. ready true: Poll has handlers
// to run (with Config.Shared, another goroutine may have run them first;
// a request past its timeout goes to the error handler in the next Poll);
// ready false and no error: nothing arrived within timeout. An error is a
// failure: a handler called Wait, or firmware mode's daemon went away. In
// inline mode it runs the engine meanwhile, in a loop that does not block
// (the link gives it nothing to block on): it keeps its CPU busy until a
// message comes or the timeout passes, now and then giving the processor
// to the process's other goroutines when they wait for one. In firmware
// mode it arms the endpoint's events and blocks on the daemon's
// notification. It may not be called from a handler.
func (ep *Endpoint) Wait(timeout time.Duration) (ready bool, err error) {
	if err := ep.enter(); err != nil {
		return false, err
	}
	defer ep.exit()
	err = ep.waitLocked(timeout)
	if errors.Is(err, errNothing) {
		return false, nil
	}
	return err == nil, err
}

// errNothing is waitLocked's "no message within the timeout", which Wait
// reports as ready false and no error; it wraps ErrTimeout for the callers
// that wait for room.
var errNothing = fmt.Errorf("%w: no message", ErrTimeout)

// waitLocked is Wait, the lock (if Shared) held.
func (ep *Endpoint) waitLocked(timeout time.Duration) error {
	if err := ep.usable(); err != nil {
		return err
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: a handler may not wait", ErrDiscipline)
	}
	const all = endpoint.EventRequest | endpoint.EventReply
	start := ep.cfg.Clock.Now()
	for n := 0; ; n++ {
		if ep.view.Ready() != 0 {
			return nil
		}
		now := ep.cfg.Clock.Now()
		left := timeout - now.Sub(start)
		if left <= 0 {
			if ep.poll == nil {
				ep.view.Arm(0)
			}
			return errNothing
		}
		// The reply timer runs in Poll, which a goroutine that waits does
		// not call: a request past ReplyTimeout makes the wait end (its
		// error handler is due), and no wait blocks past the first.
		if n%replyCheckPolls == 0 || ep.poll == nil {
			due, until := ep.expiring(now)
			if due {
				if ep.poll == nil {
					ep.view.Arm(0)
				}
				return nil
			}
			if until > 0 {
				left = min(left, until+time.Millisecond)
			}
		}
		if ep.poll != nil {
			if _, err := ep.runEngine(); err != nil {
				return err
			}
			ep.letOthersIn()
			continue
		}
		if ep.spin(min(left, ep.cfg.Spin)) {
			return nil
		}
		if ep.view.Arm(all) != 0 {
			return nil
		}
		if ep.cfg.Shared && ep.blocking > 0 {
			// Another goroutine blocks on the endpoint's notification,
			// which wakes one of us only: wait for a Poll to take
			// messages (then return: what this goroutine waited for, a
			// credit say, may have come), or a little while, and look
			// again.
			ch := ep.changed
			took := false
			ep.unlocked(func() {
				t := time.NewTimer(min(left, sharedRecheck))
				defer t.Stop()
				select {
				case <-ch:
					took = true
				case <-t.C:
				}
			})
			if took {
				return nil
			}
			continue
		}
		var err error
		block := left
		if ep.cfg.Shared {
			// Another goroutine's Poll may take the messages this one
			// was woken for, or Arm and find them there (then nobody
			// is notified): block briefly and let the caller look.
			block = min(left, sharedRecheck)
		}
		ep.blocking++
		ep.unlocked(func() { err = ep.block(block) })
		ep.blocking--
		if err != nil {
			ep.view.Arm(0)
			return err
		}
		if ep.cfg.Shared {
			return nil
		}
	}
}

// spin looks at the receive queues for up to d (Yielder.Spin, which
// yields the processor itself), letting the other goroutines of a Shared
// endpoint take the lock between looks. Its yields go on from the last
// spin's; the lock held, it takes the endpoint's Yielder and puts it back,
// so that a goroutine that takes the lock between looks spins with its
// own copy.
func (ep *Endpoint) spin(d time.Duration) bool {
	var between func()
	if ep.cfg.Shared {
		between = ep.releaseLock
	}
	y := ep.yield
	ok := y.Spin(d, func() bool { return ep.view.Ready() != 0 }, between)
	ep.yield = y
	return ok
}

// Drain polls until every request has been answered or returned, or until
// timeout (then ErrTimeout); in firmware mode it blocks (Wait) while
// nothing comes. It may not be called from a handler.
func (ep *Endpoint) Drain(timeout time.Duration) error {
	if err := ep.enter(); err != nil {
		return err
	}
	defer ep.exit()
	if err := ep.usable(); err != nil {
		return err
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: a handler may not drain", ErrDiscipline)
	}
	start := ep.cfg.Clock.Now()
	for ep.outstanding() > 0 {
		left := timeout - ep.cfg.Clock.Now().Sub(start)
		if left < 0 {
			return fmt.Errorf("%w: %d requests still unanswered after %v", ErrTimeout, ep.outstanding(), timeout)
		}
		n, err := ep.pollLocked()
		if err != nil {
			return err
		}
		if n == 0 && ep.poll == nil && ep.outstanding() > 0 {
			if err := ep.waitLocked(left); err != nil && !errors.Is(err, ErrTimeout) {
				return err
			}
		} else if n == 0 {
			ep.letOthersIn()
		}
	}
	return nil
}

// enter takes the lock of a Shared endpoint for a method. A handler runs
// holding it: if one runs, the lock's holder may be another goroutine
// (wait for it) or this one (a handler calling its endpoint, which must
// not wait forever), so enter then waits for at most the give-up time.
func (ep *Endpoint) enter() error {
	if !ep.cfg.Shared || ep.mu.TryLock() {
		return nil
	}
	start, nap := time.Now(), time.Microsecond
	for {
		if !ep.running.Load() {
			// No handler runs, so this goroutine is not in one: the
			// holder is another goroutine, which lets go soon.
			ep.mu.Lock()
			return nil
		}
		if time.Since(start) > ep.cfg.GiveUp {
			return fmt.Errorf("%w: a handler held the endpoint for %v (a handler may call only its Token)", ErrDiscipline, ep.cfg.GiveUp)
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
		if ep.mu.TryLock() {
			return nil
		}
	}
}

// exit lets go of the lock enter took.
func (ep *Endpoint) exit() {
	if ep.cfg.Shared {
		ep.mu.Unlock()
	}
}

// letOthersIn lets other goroutines have, for a moment, what a wait that
// polls in a loop holds: a Shared endpoint's lock, and every
// othersEvery calls the processor, when another goroutine waits for one
// (endpoint.Gosched). Where goroutines outnumber the processors (a
// one-CPU container runs Go with one), such a loop would otherwise keep
// the others waiting until the scheduler preempts it, 10 ms at a time.
func (ep *Endpoint) letOthersIn() {
	ep.releaseLock()
	if ep.idles++; ep.idles%othersEvery == 0 {
		endpoint.Gosched()
	}
}

// releaseLock lets go of a Shared endpoint's lock for a moment.
func (ep *Endpoint) releaseLock() { ep.unlocked(func() {}) }

// othersEvery is how many empty turns of a polling wait pass between two
// looks for goroutines that wait for the processor (letOthersIn): each
// look reads the scheduler's counts, about 100 ns.
const othersEvery = 16

// idleYieldEvery is how many inline Polls that run nothing pass between
// two looks for goroutines that wait for the processor (Poll): a look
// costs about 100 ns, which a loop of Polls waiting for a reply pays every
// few microseconds. Where the hosts of one process outnumber the
// processors, a message between two of them waits for such a yield: a few
// hundred Polls, not the scheduler's 10 ms.
const idleYieldEvery = 256

// unlocked runs f (a blocking wait) without the lock of a Shared endpoint,
// when no handler is running in this goroutine; otherwise with it.
func (ep *Endpoint) unlocked(f func()) {
	if !ep.cfg.Shared || ep.depth > 0 {
		f()
		return
	}
	ep.mu.Unlock()
	defer ep.mu.Lock()
	f()
}
