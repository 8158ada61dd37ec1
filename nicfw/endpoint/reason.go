package endpoint

import "fmt"

// Returned messages. The engine gives a message back to its sender when it
// cannot deliver it; the sender finds it in its reply receive queue with
// ClassReturned set (Descriptor.ReturnInfo says why). The reasons'
// numbers travel in the engine's return messages (docs/wire.md).

// Reason is why a message was returned to its sender.
type Reason uint8

// The reasons of return-to-sender; 0 is not a reason.
const (
	ReasonBadTag     Reason = 1 // the destination's tag differs from the message's
	ReasonNoEndpoint Reason = 2 // the destination host has no such endpoint
	// ReasonUnreachable: the transport gave up (ErrUnreachable). The host
	// is then held down: for the transport's give-up time
	// (transport.Config.GiveUpAfter, default 3 s), or until a message
	// from it arrives, whichever comes first, messages to it come back
	// with this reason at once, unsent.
	ReasonUnreachable Reason = 3
	ReasonNoHost      Reason = 4  // the destination host is not in the host table
	ReasonTooLarge    Reason = 5  // the message does not fit in the transport's largest payload
	ReasonClosed      Reason = 6  // the destination endpoint was closed (CloseEndpoint)
	ReasonRange       Reason = 7  // a bulk message's region is outside the region the receiver exposes (View.SetStoreRegion)
	ReasonIncomplete  Reason = 8  // a bulk message's receiver lost its beginning (its endpoint was replaced)
	ReasonRestarted   Reason = 9  // the destination host's transport restarted while the message was in flight (ErrRestarted)
	ReasonNoHandler   Reason = 10 // a request names a handler the receiver does not have (View.SetHandlers)
	// ReasonNoReply: no reply came within the requester's reply timeout
	// (the receiver took the request and then died, say). Given by the
	// AM-II library (amii.Config.ReplyTimeout), never by the engine.
	ReasonNoReply Reason = 11
	// NumReasons bounds the reasons: every Reason is below it, so that
	// counters by reason fit an array of NumReasons (index 0 counting what
	// names no reason).
	NumReasons = 12
)

func (r Reason) String() string {
	switch r {
	case ReasonBadTag:
		return "bad tag"
	case ReasonNoEndpoint:
		return "no such endpoint"
	case ReasonUnreachable:
		return "host unreachable"
	case ReasonNoHost:
		return "unknown host"
	case ReasonTooLarge:
		return "message too large for the transport"
	case ReasonClosed:
		return "endpoint closed"
	case ReasonRange:
		return "outside the receiver's store region"
	case ReasonIncomplete:
		return "bulk transfer interrupted"
	case ReasonRestarted:
		return "destination host restarted"
	case ReasonNoHandler:
		return "no such handler"
	case ReasonNoReply:
		return "no reply within the reply timeout"
	}
	return fmt.Sprintf("reason %d", uint8(r))
}

// ClassReturned is set in the Class of a descriptor the engine puts into a
// reply receive queue for a message returned to its sender. See
// Descriptor.ReturnInfo.
const ClassReturned Class = 0x80

// NoIndex is the Dest of a received descriptor whose sender is not in the
// receiving endpoint's translation table (it cannot be replied to).
const NoIndex = ^uint32(0)

// ReturnInfo reports whether d, taken from a reply receive queue, is a
// returned message, why, and from which send queue it had been sent. The
// rest of d is the original descriptor: Class without ClassReturned,
// NArgs, Args, Handler, Dest (the index it was sent to), and for a bulk
// message Offset, Length and RemoteOffset. A returned medium message's
// Offset and Length name its bytes in the receive area, where the engine
// put them (View.Data), not in the staging area it was sent from.
func (d *Descriptor) ReturnInfo() (reason Reason, from Queue, ok bool) {
	if d.Class&ClassReturned == 0 {
		return 0, 0, false
	}
	return Reason(d.Tag), Queue(d.Tag >> 8), true
}
