// Package nicfw is xam's NIC firmware: the engine that AM-II calls the NIC
// processor. This package holds its reliable transport (AM-II's "virtual
// network transport protocol"), endpoints, scheduling and residency, and the
// inline engine loop that joins them (Engine), and the daemon that runs the
// engine on cores of its own (Daemon, firmware mode, daemon_linux.go); the
// mapper is package nicfw/mapper, which the daemon runs when asked
// (DaemonConfig.Map).
//
// # Transport
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
// The receiver answers every DATA frame. A DATA frame carrying the expected
// sequence number is offered to the Deliver callback: if Deliver accepts it
// the channel's expected number advances and an acknowledgement is owed; if
// Deliver refuses it (the receive queue is full) a NACK goes back at once
// and nothing advances. A DATA frame with any other sequence number is a
// duplicate of one already delivered (a retransmission whose ACK was lost):
// it is not delivered again, only acknowledged again. Acknowledgements
// piggy-back (acks.go): the next DATA frame to the peer carries every one
// owed to it, so in request/reply traffic a round trip is two frames; what
// nothing carries by the end of the next Poll (and Config.AckDelay) leaves
// in an ACK frame, which carries all that are owed. ACKs and NACKs echo the
// sequence number and the stamp of the DATA frame they answer;
// piggy-backed entries carry the sequence number.
//
// At the sender an ACK whose channel is in use with the same sequence number
// frees the channel. A NACK counts only if its echoed stamp is that of
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
// drawn when the transport starts, and the receiver's as the sender last
// heard it. A new epoch from a peer resets the channels both ways and
// returns the messages in flight to it (ErrRestarted); a DATA frame meant
// for an earlier epoch of the receiver is dropped and answered with a
// RESET frame, which tells its sender. A host that leaves the host table
// and comes back (SetPeers: under the daemon's mapper, a host silent for
// the mapper's DeadAfter) gets fresh channels too.
//
// Stamps identify transmissions: a counter per Transport, so each
// transmission has its own; a NACK counts if it echoes the current
// transmission's.
//
// # Threads
//
// A Transport belongs to one goroutine, the engine thread: New, AddPeer,
// Send, Poll and Stats are called from it alone, and the callbacks run in it
// (inside Poll). The callbacks may call Send, but not Poll. Nothing in the
// transport starts a goroutine or takes a lock; the link's own contract
// (one sender, one receiver at a time) is met by being one goroutine.
//
// # Endpoints, scheduling and residency
//
// An endpoint's memory (endpoint.go) is a memfd sealed against shrinking
// and growing, which the engine maps (NewEndpointMemory) and hands to the
// application, which maps it too (MapEndpoint). It holds AM-II's four
// queues (request send, reply send, request receive, reply receive), each a
// single-producer/single-consumer ring of 96-byte descriptors with atomic
// free-running indices; the staging area, the application's, which medium
// and bulk messages are sent from and bulk messages are stored into; and
// the receive area, the engine's, which holds the bytes of received medium
// messages: one MaxMedium slot per entry of each receive queue, so that an
// entry's slot is the application's from the moment the engine puts the
// entry until the application releases it (Peek, Data, Release: the bytes
// are read in place). The application produces into the send queues and
// the engine consumes them with Take, which copies each descriptor out of
// the shared memory before checking it (class, argument count, destination
// index against the translation table's size, offset and length inside the
// staging area) and counts each refusal by reason (EndpointStats.Refused).
// The engine produces into the receive queues with Put. The engine keeps
// each endpoint's translation table and tag (its virtual network; see
// Engine).
//
// Blocking wait: two words of the endpoint's header, on cache lines of
// their own, let an application sleep instead of polling and wake an
// engine that sleeps. The application arms an event mask (EventRequest,
// EventReply: a receive queue is not empty) with EndpointView.Arm, which
// looks at the queues after arming and says whether to block; Put, after
// publishing a descriptor into an armed queue, clears the mask and calls
// the function set with EndpointMemory.SetNotify (the daemon's writes the
// eventfd the application blocks on). The other way, an engine going to
// sleep sets the idle word (EndpointMemory.SetIdle) and looks at the send
// queues once more; EndpointView.Send, after publishing, calls the kick
// function set with SetKick (the daemon's writes the engine's eventfd) if
// the word is set. Each side writes its word before it reads the other's
// index, with sequentially consistent atomics, so no wake-up is lost
// (EndpointMemory.signal has the argument). The unix-socket hand-over of
// the memfd and the eventfds is the daemon's.
//
// The memory's layout is versioned (2: receive area, event words,
// RemoteOffset); MapEndpoint refuses another version.
//
// A Scheduler (sched.go) chooses the endpoint to send from next: weighted
// round robin over the endpoints with sends pending, skipping empty ones
// and loitering up to a given number of sends on a busy one. A Residency
// (residency.go) keeps at most R endpoints in the engine's fast tables:
// touching another is an endpoint fault that evicts the least recently used
// endpoint without outstanding messages, or reports ErrMustWait when every
// resident endpoint has some. Both are bookkeeping for the engine thread,
// which the Engine drives.
//
// # Wire format
//
// Every message, acknowledgements included, is one AAL5 CPCS-PDU on the
// circuit Config.VPI/VCI (default 0/32), carried whole in one xam frame
// (docs/wire.md: Ethernet header, 4-byte frame header, cells). The AAL5 SDU
// is a 20-byte transport header followed by the payload (DATA only),
// big-endian:
//
//	offset  size  field
//	0       1     type: 1 DATA, 2 ACK, 3 NACK, 4 RESET
//	1       1     channel (0..C-1)
//	2       2     sequence number of the channel's message
//	4       4     stamp: DATA the transmission's, the others the echoed one
//	8       2     payload length (0 but for DATA)
//	10      2     k, the number of acknowledgement entries
//	12      4     source epoch (never 0)
//	16      4     destination epoch (0: not heard yet)
//	20      4k    entries: channel, 0, sequence number (2 bytes)
//	20+4k   n     payload
//
// Bytes 10..11 count the acknowledgements the frame carries besides its
// own meaning; they follow the header, four bytes each (channel, 0,
// sequence number), before the payload. A DATA frame's entries acknowledge
// messages the other way; an ACK's header acknowledges one channel and its
// entries more.
//
// A PDU spans as many frames as it needs (28 cells per frame at the
// standard MTU of 1500); the first is flagged cells.FlagStart, and a
// receiver drops the partial PDU of a peer whose end was lost when the next
// PDU starts (Stats.Abandoned). Losing any frame loses the message, which
// is then retransmitted whole. A message carries at most Config.MaxPayload
// bytes (default DefaultMaxPayload: a medium message of 8 KB and the
// engine's header, 7 frames at MTU 1500). An ACK or NACK is one cell, a
// 71-byte frame, plus a cell per 12 further entries. A receiver drops and
// counts frames not addressed to its MAC, from a MAC not in its host
// table, with another EtherType, that fail cell or AAL5 checks (HEC,
// length, CRC-32), on another circuit, or whose header is malformed
// (unknown type, channel out of range, length and entry count not matching
// the SDU).
//
// # Engine
//
// An Engine (engine.go) joins the pieces, run inline: the caller's
// goroutine calls Poll, which sends queued return messages, lets the
// Scheduler choose endpoints to send from, polls the Transport, notices
// acknowledgements and puts returned messages into their senders' queues.
// CreateEndpoint gives an endpoint its virtual network (VNet): a tag and a
// translation table from index to Name (host, endpoint). The engine stamps
// the endpoint's tag on what it sends (a send descriptor's Tag is ignored)
// and delivers a message only to an endpoint with the same tag.
//
// Each endpoint has at most one message taken from its send queues
// (replies first) and not finished: pending, in flight, or being returned.
// That keeps its messages in order across the C channels; C endpoints can
// have a message in flight to one host at once. EngineConfig.Window above 1
// pipelines an endpoint's short and medium messages: a message that leaves
// for a remote host frees the slot for the next, and up to Window of them
// are in flight at once, on as many channels, each kept with its
// descriptor (an inflightRef with a flight) so that it can still be
// returned, a medium message with the bytes the transport kept. They are
// then in order per channel only, as in AM-II: a lost message, sent again,
// arrives after those that left after it. Bulk chunks still go one at a
// time through the slot. The scheduler is asked only
// about endpoints whose next message could leave now (a free channel, a
// frame to pin), so a blocked endpoint is not charged a send. The sender is
// touched in the Residency before its message is taken, held while the
// message is in flight and released on its ACK (seen as its channel freed)
// or its return; one frame is always left unpinned, so a delivery to a
// non-resident endpoint can load it (R is at least 2). Deliveries touch the
// destination too; its receive queue full means a NACK.
//
// Message classes. A short message carries its arguments only. A medium
// message (up to MaxMedium bytes) is built when its descriptor is taken:
// the engine copies its bytes out of the staging area then, once, so the
// application may reuse them as soon as the descriptor is taken
// (EndpointView.Progress). The receiving engine copies them into the
// receive-area slot of the receive queue entry it puts, and the
// descriptor's Offset and Length name them there. A medium message that
// does not fit in the transport's payload (MaxPayload) is returned with
// ReasonTooLarge. A bulk message (any length inside the staging area)
// travels in chunks as large as the payload allows, one after another
// through the endpoint's slot, each acknowledged before the next leaves, so
// they arrive in order; the receiving engine writes each at RemoteOffset
// plus its offset into the receiving endpoint's staging area, after
// checking the whole region against the part of it the receiver exposes
// (EndpointView.SetStoreRegion; ReasonRange), and only the last puts a
// descriptor (Offset =
// RemoteOffset, Length = the whole length, handler and arguments as sent).
// A receiver keeps, per sending endpoint, the bulk message in progress (its
// number and the offset expected next): a chunk that does not continue it
// (its receiving endpoint was closed and replaced) is returned with
// ReasonIncomplete. A bulk message is returned once, whole: the receiver
// returns its first failing chunk and drops the rest; the sender, told,
// sends no more of it, and does not return it itself again.
//
// Return to sender: a message for an unknown or closed endpoint, with a
// wrong tag, a bulk region that does not fit, or a request to a handler the
// receiver has not registered (EndpointView.SetHandlers) is accepted (ACKed) and
// answered with a return message carrying the reason, queued
// (EngineConfig.ReturnQueue; full: NACK) until a channel is free; a return
// is never returned. The transport's ErrUnreachable returns a message
// locally and marks the host down for GiveUpAfter, during which messages
// to it are returned at once. A returned message arrives in the sender's
// reply receive queue as its original descriptor with ClassReturned set in
// Class and Tag = reason | sending queue<<8 (Descriptor.ReturnInfo); Dest
// is the index it was sent to. A returned medium message carries its bytes
// back (the return message includes them, a local return takes the copy
// made at take) into the receive area, where Offset and Length then name
// them; a returned bulk message keeps the Offset, Length and RemoteOffset
// it was sent with. A received descriptor's Dest is the sender's index in
// the receiver's table (NoIndex if absent) and its Tag the message's.
//
// Closing (endpoint_close.go): CloseEndpoint stops an endpoint at once (it
// leaves the scheduler; what it has not sent is dropped, nothing is
// returned to it), keeps its id as a tombstone that answers ReasonClosed,
// and closes its memory once its message in flight, if any, is finished;
// CreateEndpoint may reuse the id. A return for the old endpoint that
// arrives after the id was reused goes to the new one if it has the same
// tag.
//
// The engine's message, the transport payload, big-endian:
//
//	offset    size  field
//	0         1     queue: 0 request, 1 reply (the sender's send queue)
//	1         1     class: 1 short, 2 medium, 3 bulk
//	2         1     number of arguments n (0..8)
//	3         1     return reason, 0 for a message that is not a return
//	4         2     destination endpoint (a return: the original sender)
//	6         2     source endpoint
//	8         4     handler
//	12        4     destination index in the original sender's table
//	16        8     tag
//	24        8n    arguments
//
// followed, for medium and bulk messages, by an extension and the data:
//
//	24+8n     4     offset of the message in the sender's staging area
//	28+8n     4     length L of the message (bulk: of all its chunks)
//	32+8n     4     bulk: offset in the receiver's staging area; medium: 0
//	36+8n     4     bulk: the message's number at its sending endpoint
//	                (from 1); medium: 0
//	40+8n     4     bulk: offset of this chunk's data in the message;
//	                medium: 0
//	44+8n     4     c, the length of the data that follows
//	48+8n     c     data: a medium message's L bytes (a return too); a
//	                bulk chunk's, at least 1 (a return: none)
//
// A message whose fields disagree (a length that does not match, a medium
// message longer than MaxMedium or with c other than L, a chunk past its
// message's end) is dropped and counted. Refused descriptors are counted
// and dropped, not returned.
package nicfw
