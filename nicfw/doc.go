// Package nicfw is xam's NIC firmware engine: AM-II's NIC processor. It
// joins an endpoint's shared memory (package nicfw/endpoint) and the
// reliable transport (nicfw/transport) into the engine loop (Engine):
// virtual networks, scheduling, residency, return to sender, and the
// modules that extend it (module.go; the mapper, nicfw/mapper, is the
// first). It runs inline, in the caller's goroutine, or in firmware mode
// under a daemon on cores of its own (nicfw/daemon).
//
// # Scheduling and residency
//
// A Scheduler (sched.go) chooses the endpoint to send from next: a
// two-level weighted round robin over the resident endpoints with sends
// pending, across owners first (VNet.Owner: the uid in firmware mode),
// each taking turns of up to Loiter sends however many endpoints it has,
// then across the owner's endpoints by their weights (VNet.Weight),
// skipping empty ones; a decision costs the same however many endpoints
// are idle. A Residency (residency.go) keeps the books of the R frames;
// the engine moves the state (engine_residency.go): only resident
// endpoints are scheduled and have their translation table in a frame,
// and the others ring a doorbell in their shared header that faults them
// in, evicting the least recently used endpoint without outstanding
// messages. Faults are bounded per owner: one at its share of the frames
// (R over the owners with work) evicts its own endpoints, not others'.
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
// descriptor (a flight record, as every message in flight has) so that it can still be
// returned, a medium message with the bytes the transport kept. They are
// then in order per channel only, as in AM-II: a lost message, sent again,
// arrives after those that left after it. A bulk message holds the slot
// until its last chunk is acknowledged; its chunks share the window
// (bulk.go). The scheduler is asked only
// about endpoints whose next message could leave now (a free channel, a
// frame to pin), so a blocked endpoint is not charged a send. The sender is
// touched in the Residency before its message is taken, held while the
// message is in flight and released on its ACK (the transport's Acked callback)
// or its return; one frame is always left unpinned, so a delivery to a
// non-resident endpoint can load it (R is at least 2), and with several
// owners each pins at most its share of the frames, leaving one that every
// other owner with an endpoint open may pin (mayPin): one user's messages
// held up by a slow receiver cannot keep another user's from leaving.
// Deliveries touch the destination too; its receive queue full means a
// NACK.
//
// Message classes. A short message carries its arguments only. A medium
// message (up to MaxMedium bytes) is built when its descriptor is taken:
// the engine copies its bytes out of the staging area then, once, so the
// application may reuse them as soon as the descriptor is taken
// (endpoint.View.Progress). The receiving engine copies them into the
// receive-area slot of the receive queue entry it puts, and the
// descriptor's Offset and Length name them there. A medium message that
// does not fit in the transport's payload (MaxPayload) is returned with
// ReasonTooLarge. A bulk message (any length inside the staging area)
// travels in chunks as large as the payload allows, up to Window of them
// in flight at once on as many channels, so they may arrive in any order.
// The receiving engine writes each at RemoteOffset plus its offset into
// the receiving endpoint's staging area, after checking the whole region
// against the part of it the receiver exposes
// (endpoint.View.SetStoreRegion; ReasonRange), and counts the bytes; the
// chunk that completes the count puts the descriptor (Offset =
// RemoteOffset, Length = the whole length, handler and arguments as sent).
// A pooled bulk message (RemoteOffset endpoint.PoolOffset; pool.go) names
// no place: the receiving engine finds it a block of the endpoint's
// receive pool (endpoint.View.SetPool) as its first chunk arrives, refuses
// it for now (NACK; counted in EngineStats.PoolFull) while no block is
// free, and takes the block back once the application has released the
// message's receive queue entry: GRIM's optimistic flow control, one pool
// shared by every sender, nothing reserved per peer. The sender sends a
// pooled message's first chunk alone and the rest once it is acknowledged,
// and keeps one channel to the host free of such probes while a message
// admitted there has chunks to send, so that a full pool delays messages
// and never wedges them (pool.go).
// A receiver keeps, per sending endpoint, the bulk message in progress (its
// number and the bytes stored), begun by the first of its chunks to
// arrive: a chunk of it for another endpoint than that one's (the endpoint
// was closed and replaced) is returned with ReasonIncomplete. A sender
// whose receiver's incarnation (the transport's epoch) changes while a
// bulk message is under way returns it with ReasonRestarted (bulk.go). A bulk message is returned once, whole: the receiver
// returns its first failing chunk and drops the rest; the sender, told,
// sends no more of it, and does not return it itself again.
//
// Return to sender: a message for an unknown or closed endpoint, with a
// wrong tag, a bulk region that does not fit, or a request to a handler the
// receiver has not registered (endpoint.View.SetHandlers) is accepted (ACKed) and
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
// The engine's messages travel as the transport's payloads: a header
// (queue, class, argument count, return reason, endpoints, handler, index,
// tag), the arguments, and for medium and bulk messages an extension and
// the data; docs/wire.md has the table, and that of a module's control
// message. A short message of up to two arguments goes in a compact form
// of 15 bytes and its arguments (engine_msg.go), which the transport
// carries in one cell.
//
// A message whose fields disagree (a length that does not match, a medium
// message longer than MaxMedium or with c other than L, a chunk past its
// message's end) is dropped and counted. Refused descriptors are counted
// and dropped, not returned.
package nicfw
