// Package transport is the reliable transport of xam's NIC firmware
// (AM-II's "virtual network transport protocol"): logical channels,
// sequence numbers, acknowledgements, retransmission and epochs, between
// this host and its peers on one afxdp.Link. Its user (the engine,
// package nicfw) sees a contract: Send with a cookie, and the Deliver,
// Acked and Returned callbacks that Poll runs; Peer, Busy and the
// accessors say what it may send now. docs/wire.md has the frame tables.
//
// # Protocol
//
// A Transport moves messages between this host and its peers on one
// afxdp.Link. Peers are named by a small HostID that AddPeer maps to a MAC
// address (the mapper's host table). Towards each peer there are C logical
// channels (Config.Channels); each channel is stop-and-wait with a 16-bit
// sequence number, so at most C messages per peer are unacknowledged at
// once and Send reports ErrBusy when all of them are. The state lives in two
// tables, one row per peer and one column per channel (channels.go):
//
//   - send channel table: in use, sequence number, the unacknowledged
//     message (its transport header and payload, kept to retransmit), the
//     stamp of its current transmission, the time since which nothing has
//     been heard for it (its first transmission or its last valid NACK),
//     the retry count and the time of the next retransmission;
//   - receive channel table: the sequence number expected next, which
//     suppresses duplicates.
//
// The receiver answers DATA frames. A DATA frame carrying the expected
// sequence number is offered to the Deliver callback: if Deliver accepts it
// the channel's expected number advances and an acknowledgement is owed; if
// Deliver refuses it (the receive queue is full) a NACK goes back at once
// and nothing advances. A DATA frame with the number before it carries the
// message delivered last (a retransmission whose ACK was lost): it is not
// delivered again, only acknowledged again. Those two numbers are the
// channel's receive window; a few behind it are late copies from the
// network, dropped unanswered, and no other number can come from the peer
// (see Forgery below). Acknowledgements
// piggy-back (acks.go): the next DATA frame to the peer carries every one
// owed to it, so in request/reply traffic a round trip is two frames; what
// nothing carries by the end of the next Poll (and Config.AckDelay) leaves
// in an ACK frame, which carries all that are owed. ACKs and NACKs echo the
// sequence number and the stamp of the DATA frame they answer;
// piggy-backed entries carry the sequence number.
//
// At the sender an ACK whose channel is in use with the same sequence number
// frees the channel and tells the sender (Config.Acked, with the cookie
// given to Send); one for the message before, or a few before, is a
// duplicate, ignored, and one for any other number is forged. A NACK
// counts only if its echoed stamp is that of
// the channel's current transmission: a NACK for an earlier transmission is
// stale (the message may since have been retransmitted and accepted) and is
// ignored. A valid NACK schedules a retransmission after Config.NackDelay.
//
// Retransmission is driven by a timer scan (timers.go) that Poll runs every
// Config.ScanInterval of its clock. The transport keeps, per peer, the
// number of unacknowledged channels, and a list of the peers whose count is
// not zero; the scan visits only those. A channel whose retransmission is
// due is sent again with a fresh stamp, unless nothing has been heard
// for it (no NACK) for Config.GiveUpAfter since its first transmission or
// its last valid NACK: then the peer is taken to be unreachable, the channel
// is freed and the message goes back to its sender through the Returned
// callback with ErrUnreachable. A NACK proves the peer alive, so a message
// that the peer keeps refusing is not returned; the sender sees ErrBusy
// instead (back-pressure).
//
// Sequence numbers start at 0 on both sides, so a restart must be noticed
// (epochs.go): every frame carries its sender's epoch, a random number
// drawn when the transport starts, and a destination epoch that names the
// receiver as the sender knows it: a number the receiver asked of it in a
// RESET (its epoch, a challenge, or a random number: a renewal, below).
// Both are required: a frame whose destination epoch is not the one asked
// of its sender is refused, 0 included. The channels between two hosts
// belong to a pair of incarnations, each side's; when either changes (a
// restart, a new epoch believed, a new incarnation toward the peer) both
// directions start again at 0 and every message sent under the old pair
// and not acknowledged goes back to its sender (ErrRestarted,
// ErrUnreachable), for it may have been delivered. A new pair is
// confirmed both ways before any channel carries data under it (the
// handshake): a message to a peer that has not told what to name it under
// the current pair waits in its channel, and a RESET asks the peer, which
// answers with one of its own (AddPeer sends the first at once, so a
// peer's first message costs a round trip at most); the waiting messages
// go once it is in, and a pair that changes meanwhile takes them along.
// A new epoch from a peer is believed only if its frame names the
// challenge for it, which a RESET sent to the peer's address tells. A
// frame meant for an earlier pair (or naming a destination epoch renewed
// since) is dropped and answered with a RESET frame, which tells its
// sender what to name. A host that leaves the host table and comes back
// (SetPeers: under the daemon's mapper, a host silent for the mapper's
// DeadAfter) gets fresh channels too, under a new incarnation toward it.
//
// Stamps identify transmissions: a counter per Transport from a random
// start, so each transmission has its own; a NACK counts if it echoes the
// current transmission's.
//
// # Forgery
//
// Without a key (Config.Key, below) frames are not authenticated here
// (the engine authenticates messages of a virtual network with a key,
// package nicfw); what the transport checks keeps a host on the segment
// from forging what it cannot see. Frames from
// an address not in the host table are dropped. A host that sends frames
// under a peer's address without knowing the epochs gets nothing through:
// a made-up source epoch is a claim it cannot answer (the challenge goes
// to the peer's address), and a destination epoch of 0 or a made-up one
// is refused. One that has learnt both epochs (by taking the peer's
// address on a bridge for a while, say) must still hit sequence numbers
// it does not see: every number a frame carries (its DATA's, its
// acknowledgements') is checked against its channel's window before any of
// it takes effect (receive.go), and a number no peer can send shows the
// frame forged: it is dropped whole (Stats.OutOfWindow, ForgedAcks), and
// the receiver renews the destination epoch it asks of that peer, telling
// the peer in a RESET sent to its address. So such a forger has one try
// per destination epoch it learns: unless its first DATA or
// acknowledgement number lies in the window (lateWindow+2 = 6 numbers of
// 2^16; under 1e-4), it is found out, refused from then on, and no sweep
// of sequence numbers walks a window forward. What the transport cannot
// stop: a host that sees the frames as they pass (on the path, or holding
// the peer's address) knows the current numbers and forges at will; before
// a peer's first frame anyone may speak for it (first contact), and until
// a frame of the peer has named the destination epoch asked of it, a host
// that knows this transport's epoch toward the peer (a first row's is the
// transport's own) can have the peer's record replaced by RESETs that name
// it (epochs.go); and a host that knows the destination epoch asked of a
// peer can send RESETs that make this transport name the peer wrongly
// until the peer's next RESET (each a denial of service, as a flood is,
// never a forged delivery). Refusals
// are counted in Stats (ZeroEpoch, StaleEpoch, Unconfirmed, OutOfWindow,
// ForgedAcks, Late, Renewals), and RESETs to one peer are rate-limited, so
// that a flood of forgeries is not answered with one.
//
// # Authentication
//
// With Config.Key (one key for the host table: a job's or a cluster's)
// every frame the transport sends ends in a trailer, a counter and an
// AES-GMAC tag over the whole frame (auth.go, docs/wire.md "Authenticated
// frames"), and a frame whose trailer does not check is dropped before
// any of it takes effect (Stats.AuthFailed). A host without the key then
// forges nothing, whatever epochs and sequence numbers it has seen: the
// Forgery paragraphs above are for unkeyed transports.
//
// Replays need no window of their own: a copy of a frame sent before
// checks, but the transport takes a frame only as what it is, so the copy
// is a duplicate, and duplicates the network makes anyway are handled.
// A DATA frame replayed carries a sequence number behind its channel's
// receive window, or the one before it: it is dropped (late), or
// acknowledged again and not delivered (a duplicate). An ACK names a
// message acknowledged already (stale, ignored); a NACK echoes the stamp
// of an earlier transmission (stale) or, until the next retransmission,
// the current one, which only puts that retransmission off by NackDelay
// (what a host on the path may do by holding frames anyway). A RESET
// replayed names a destination epoch: one renewed since is refused, and
// one still current makes this transport name the peer what the peer
// asked for then; if the peer has renewed since, its next frames say so
// in a RESET (epochs.go), and nothing was delivered or acknowledged. A
// frame of a peer's previous incarnation is stale (StaleEpoch), and one
// of an older incarnation claims a new epoch and must answer the
// challenge, which also counts the epochs believed for the peer, so a
// claim believed before does not answer it again. Two things
// would let numbers come round again, and a keyed transport closes one,
// the handshake the other: a channel's sequence numbers wrap after 2^16
// messages, so when one of a keyed transport's channels wraps, send or
// receive, the destination epoch asked of the peer is renewed (epochs.go)
// and frames recorded before name one that is no longer taken; and no
// transport takes destination epoch 0 (a peer's frames name this
// incarnation only after a RESET tells it), so after a restart a
// recorded first frame is not taken either.
//
// Batches: within a pass (BeginPass, EndPass: an engine's run) every
// frame sent, DATA, retransmission, ACK or NACK, joins one batch that goes
// to the link in one Send when the pass ends, or before the pass receives
// (so answers are never awaited for frames not yet sent, and no channel's
// frames change while they wait). Outside a pass each Send goes at once.
// Stats.Batches and Stats.BatchFrames count them.
//
// # Threads
//
// A Transport belongs to one goroutine, the engine thread: New, AddPeer,
// Send, Poll and Stats are called from it alone, and the callbacks run in it
// (inside Poll). The callbacks may call Send, but not Poll. Nothing in the
// transport starts a goroutine or takes a lock; the link's own contract
// (one sender, one receiver at a time) is met by being one goroutine.
//
// # Wire format
//
// A message of up to CompactPayload bytes is one ATM cell of its own on
// circuit Config.VPI/VCI+1 (compact.go), one of up to CompactMax bytes
// that cell and a continuation cell behind it; the first cell also carries the
// acknowledgement owed to its destination when there is exactly one (so a
// round trip of short requests and replies is two frames of one cell
// each), else follows a compact ACK cell in the same frame. The steady
// state of that traffic goes by a lane of its own both ways (lane.go):
// SendNow builds the message's frame (the one cell) in its channel's
// buffer and hands it to the link at once, and a received compact cell with an acknowledgement whose
// epochs, window and sequence number are the expected ones is handled from
// its fields, without the DATA PDU it stands for. Every other message,
// acknowledgements included, is one AAL5 CPCS-PDU on the
// circuit Config.VPI/VCI (default 0/32): a 20-byte transport header (type,
// channel, sequence number, stamp, length, acknowledgement count, source
// and destination epochs), the piggy-backed acknowledgements, and the
// payload (a RESET's: the destination epoch to write from then on; its
// sequence number field carries a flag, resetAnswer: its sender waits for
// a RESET in answer). A PDU spans as many frames as it needs; losing any
// of them
// loses the message, which is then retransmitted whole. With Config.Key
// every frame ends in a trailer cell (auth.go). The tables, and
// what a receiver drops and counts, are in docs/wire.md ("The firmware
// transport"), the one place for them.
package transport
