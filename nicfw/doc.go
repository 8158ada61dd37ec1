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
// and the others ring a doorbell that faults them in, evicting the least
// recently used endpoint without outstanding messages. Doorbells are bits
// of a page each application shares with the engine (engine_bells.go), so
// that an idle Poll reads one word per application however many endpoints
// are open; resident endpoints idle for a while are parked behind their
// doorbells too. Faults are bounded per owner: one at its share of the frames
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
// Where the details are: the send path, each endpoint's one message in
// hand, the window and the frames messages pin (engine_send.go); the
// express path, an inline application's short message handed to the
// engine without its send queue (engine_express.go); the compact lane,
// request/reply traffic of short messages from the descriptor to the
// transport and from the transport's payload to the receive descriptor
// without the slot and the msg, with the same checks (engine_lane.go); the
// message classes and the engine's message on the wire (engine_msg.go,
// bulk.go, pool.go); the receive path and what it refuses
// (engine_receive.go); return to sender (engine_return.go); closing an
// endpoint (endpoint_close.go); what it counts per endpoint and per peer
// host, for a daemon's statistics and metrics (counters.go).
package nicfw
