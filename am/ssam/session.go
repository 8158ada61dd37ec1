package ssam

import (
	"time"

	"github.com/xam-project/xam/driver"
)

// Sessions. A requester's sequence numbers mean something only to the
// responder that has followed them from the start, so before its first
// request on a connection an endpoint syncs: it sends a sync (ack field 0)
// carrying the sequence number of its next request and, in the handler
// field, a session number drawn at random when the endpoint was made.
// Requests made meanwhile wait in the window, unsent, until the
// responder's sync answer (ack field 1, the same session number) comes
// back, and then leave together; the timers send the sync again every
// timeout, and a full window gives up as always. A responder that sees a
// session number other than the one it follows answers it and notes it as
// announced, with its sequence number; it starts over when the first request
// of that session arrives (its tag, that sequence number): it follows the
// new session, expects that sequence number next and forgets its saved
// answers. So a responder serves one requester after another (a ping
// client, then the next), and never answers a new requester's request with
// an answer saved for an earlier one's; and a made-up sync alone changes
// nothing but the announced session. Until a requester's first answer has
// come, each retransmission of its requests is preceded by its sync again,
// so that its session is announced again when a made-up sync took its place.
// A sync with the session it already follows is answered again and changes
// nothing (its answer was lost).

// Sync begins this endpoint's session on connection c (see Sessions at the
// top of session.go) ahead of its first request, which does it otherwise. It
// sends the sync and returns; Synced reports when the responder's answer
// has come (Poll takes it). An endpoint that must not wait for the sync on
// its first requests, as a benchmark that times them, syncs first.
func (ep *Endpoint) Sync(c int) error {
	if err := ep.checkConn(c); err != nil {
		return err
	}
	return ep.startSync(c)
}

// Synced reports whether the responder on connection c follows this
// endpoint's session.
func (ep *Endpoint) Synced(c int) bool { return c >= 0 && c < len(ep.conns) && ep.conns[c].synced }

// startSync sends connection c's sync unless it is synced or syncing.
func (ep *Endpoint) startSync(c int) error {
	cn := &ep.conns[c]
	if cn.synced || cn.syncing {
		return nil
	}
	cn.syncing, cn.syncAt = true, time.Time{}
	return ep.sendSync(c, cn.next, syncAsk, ep.session)
}

// sendSync sends a sync (ask) or its answer on connection c, from the
// connection's sync slot.
func (ep *Endpoint) sendSync(c int, seq, ask uint8, session uint32) error {
	off := syncSlot(ep.cfg.Window, ep.per)
	if _, _, err := ep.build(c, off, flowWord(kindSync, seq, ask), session, 0); err != nil {
		return err
	}
	if ask == syncAsk {
		ep.stats.Syncs++
	}
	return ep.dev.Send(c, off, driver.EOM)
}

// follows reports whether a request tagged tag with sequence number seq
// belongs to the session the responder follows on cn; the first request of
// the announced session (its tag and first sequence number) begins it.
func (ep *Endpoint) follows(cn *conn, tag uint32, seq uint8) bool {
	switch {
	case cn.session != 0 && tag == cn.tag:
		return true
	case cn.announced != 0 && tag == cn.annTag && seq == cn.annSeq:
		ep.begin(cn, cn.announced, seq)
		return true
	}
	return false
}

// begin makes the responder on cn follow requester session session from
// sequence number seq: it starts over, so that no answer saved for the
// last session answers this one's requests.
func (ep *Endpoint) begin(cn *conn, session uint32, seq uint8) {
	cn.session, cn.tag, cn.expected = session, sessionTag(session), seq
	cn.announced, cn.annTag = 0, 0
	clear(cn.answers)
	ep.stats.Sessions++
}
