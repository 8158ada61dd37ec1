package transport

import "time"

// The timer scan, in the engine thread, run by Poll every
// Config.ScanInterval of the transport's clock. It visits only the peers on
// the active list (unacked > 0, kept by occupy and release in channels.go),
// so its cost follows the traffic in flight, not the size of the host
// table. A channel sent on since the last scan without reading the clock
// (setTimers, send.go) has its timers started. For each channel in use
// whose retransmission is due it either
//
//   - gives up, when nothing has been heard for the message (no NACK) for
//     GiveUpAfter since its first transmission or its last valid NACK: the
//     channel is freed and the message goes back through Returned with
//     ErrUnreachable; or
//   - retransmits it with a fresh stamp (transmit, send.go).
//
// Returned runs with the channel already free, and may call Send; a peer it
// puts back on the active list waits for the next scan.

// scan runs the timer scan at now.
func (t *Transport) scan(now time.Time) error {
	t.stats.Scans++
	// Backwards, because release swaps the last active peer into the place
	// of one that leaves, and that one has then been visited already; a
	// peer that Returned's Send appends is left for the next scan.
	for i := len(t.active) - 1; i >= 0; i-- {
		p := t.active[i]
		t.stats.ScanVisits++
		for j := range p.send {
			c := &p.send[j]
			if c.inUse && !c.timed {
				// Sent since the last scan, with the timers left to it.
				c.heard, c.due, c.timed = now, now.Add(t.cfg.RetransmitAfter), true
				continue
			}
			if !c.inUse || now.Before(c.due) {
				continue
			}
			if now.Sub(c.heard) >= t.cfg.GiveUpAfter {
				// Given up with every other message to p: whether p got
				// it is not known, so the channels start again with a
				// new incarnation toward p (epochs.go).
				t.reincarnate(p)
				continue
			}
			if !c.sent {
				// Waiting for the incarnations to be confirmed: ask
				// again (hello, epochs.go).
				c.due = now.Add(t.cfg.RetransmitAfter)
				if t.ready(p) {
					if err := t.sendWaiting(p); err != nil {
						return err
					}
				} else {
					p.stalled = true // no answer to the handshake yet
					if err := t.hello(p); err != nil {
						return err
					}
				}
				continue
			}
			c.retries++
			if err := t.transmit(p, c); err != nil {
				return err
			}
			c.due = now.Add(t.cfg.RetransmitAfter)
			t.stats.Retransmits++
			p.stats.Retransmits++
			p.stalled = true
		}
	}
	return nil
}

// giveUp frees channel c of p and returns its message to the sender.
func (t *Transport) giveUp(p *Peer, c *sendChannel) {
	t.release(p, c)
	t.stats.Returned++
	p.stats.Returned++
	if t.cfg.Returned != nil {
		t.cfg.Returned(p.id, c.cookie, t.payload(c), ErrUnreachable)
	}
}
