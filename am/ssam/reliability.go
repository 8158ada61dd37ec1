package ssam

import (
	"fmt"
	"time"

	"github.com/xam-project/xam/driver"
)

// Reliability, as SSAM did it. Each side may have up to W requests
// outstanding per connection (W <= 63). The responder delivers requests in
// order (go-back-N: it drops a request that is not the next one), answers
// each with the reply its handler sent or, when the handler sent none, an
// explicit ack, and keeps that answer in one of W reply buffers. A duplicate
// request (one it has already delivered) means the answer was lost: it
// sends the saved answer again and does not run the handler. The requester
// keeps each request in one of W request buffers until its answer arrives,
// accepts answers in order only (a later answer, or one already handled,
// is dropped), and when the oldest request has waited longer than the
// timeout it sends every outstanding request again. Hence the 2W buffers
// per connection, preallocated in the device's pinned send area.

// outstanding is a request in the window.
type outstanding struct {
	off     int       // first send slot
	slots   int       // send slots it occupies (cells)
	bulk    bool      // sent on the bulk VC
	handler HandlerID // the handler it names (Returned)
	sentAt  time.Time
}

// saved is an answer kept for duplicate requests.
type saved struct {
	valid bool
	seq   uint8
	off   int
	slots int
	bulk  bool
}

// timerPolls is how often Poll looks at the retransmission timers: every
// so many calls, because reading the clock costs more than an empty poll.
// A request's timer starts when the timers first see it, so a timeout is
// late by at most timerPolls polls.
const timerPolls = 16

// timers retransmits, on every connection whose oldest request has waited
// longer than the timeout, all its outstanding requests; and sends again
// the syncs that have waited as long.
func (ep *Endpoint) timers() error {
	var now time.Time
	for c := range ep.conns {
		cn := &ep.conns[c]
		if cn.syncing {
			if now.IsZero() {
				now = ep.cfg.Clock.Now()
			}
			if cn.syncAt.IsZero() {
				cn.syncAt = now
			} else if now.Sub(cn.syncAt) > ep.cfg.Timeout {
				cn.syncAt = now
				if err := ep.sendSync(c, cn.base, syncAsk, ep.session); err != nil {
					return err
				}
			}
			continue
		}
		if cn.next == cn.base {
			continue
		}
		if now.IsZero() {
			now = ep.cfg.Clock.Now()
		}
		for seq := cn.base; seq != cn.next; seq = (seq + 1) & seqMask {
			if o := &cn.window[ep.buf(seq)]; o.sentAt.IsZero() {
				o.sentAt = now
			}
		}
		if now.Sub(cn.window[ep.buf(cn.base)].sentAt) <= ep.cfg.Timeout {
			continue
		}
		if !cn.answered {
			// The responder may not follow this session yet: a made-up
			// sync may have taken its place as announced (Sessions).
			if err := ep.sendSync(c, cn.base, syncAsk, ep.session); err != nil {
				return err
			}
		}
		if err := ep.sendOutstanding(c, now, true); err != nil {
			return err
		}
	}
	return nil
}

// sendOutstanding sends every outstanding request of connection c (go back
// N), single-cell requests in runs of consecutive slots, one trap per run;
// their timers start at now (zero: when the timers next see them). retrans
// counts them as retransmissions.
func (ep *Endpoint) sendOutstanding(c int, now time.Time, retrans bool) error {
	cn := &ep.conns[c]
	run, runFrom := 0, 0
	for seq := cn.base; ; seq = (seq + 1) & seqMask {
		var o *outstanding
		if seq != cn.next {
			o = &cn.window[ep.buf(seq)]
		}
		if run > 0 && (o == nil || o.bulk || ep.buf(seq) == 0) {
			if err := ep.dev.SendBatch(c, runFrom, run, driver.EOM); err != nil {
				return err
			}
			run = 0
		}
		if o == nil {
			return nil
		}
		o.sentAt = now
		if retrans {
			ep.stats.Retransmits++
		}
		if o.bulk {
			if err := ep.transmit(c, o.off, o.slots, true); err != nil {
				return err
			}
			continue
		}
		if run == 0 {
			runFrom = o.off
		}
		run++
	}
}

// Outstanding returns the number of unanswered requests on connection c
// (0 for a connection the device does not have).
func (ep *Endpoint) Outstanding(c int) int {
	if c < 0 || c >= len(ep.conns) {
		return 0
	}
	cn := &ep.conns[c]
	return int((cn.next - cn.base) & seqMask)
}

// Drain polls until every request on every connection has been answered
// (or rejected: OnReturn), or until timeout (then ErrTimeout). It may not
// be called from a handler.
func (ep *Endpoint) Drain(timeout time.Duration) error {
	if ep.closed {
		return ErrClosed
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: a handler may not drain", ErrDiscipline)
	}
	start := ep.cfg.Clock.Now()
	for {
		busy := false
		for c := range ep.conns {
			busy = busy || ep.Outstanding(c) > 0
		}
		if !busy {
			return nil
		}
		if ep.cfg.Clock.Now().Sub(start) > timeout {
			return fmt.Errorf("%w: requests still unanswered after %v", ErrTimeout, timeout)
		}
		if _, err := ep.Poll(); err != nil {
			return err
		}
	}
}
