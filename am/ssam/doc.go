// Package ssam is SSAM's Active Messages, von Eicken et al.'s single-cell
// Active Messages, over a driver.Device. Each message names a handler that
// runs when it arrives; communication is request/reply: a request handler
// may send one reply, a reply handler sends nothing, which rules out
// deadlock without flow control in the network.
//
// The model: 40 data bytes in one ATM cell with SSAM's 8-byte header,
// longer messages as AAL5 PDUs, and reliability in software — a window of
// W requests per connection, 2W preallocated buffers in the device's pinned
// send area, acks piggy-backed on replies or sent explicitly, go-back-N
// retransmission on a timer, duplicate requests answered from the saved
// reply without running the handler twice. Polling only: every send also
// polls, and Poll runs handlers for what has arrived. An SSAM endpoint is
// driven by one goroutine.
//
// The API is one of a family with package amii and package grim (see
// package am for the table): the same verbs where the operation is the
// same, the differences the papers' own.
//
// Opening: Open makes an endpoint on an AF_XDP link with one connection
// to a peer on VCI (and the device under it), as amii.Open and grim.Open
// make theirs; New makes one on a device the caller opened (driver.Open:
// several connections, other VCs), as amii.New and grim.New do on an
// engine. SSAM has no Dial: its device is the process's own, with no
// daemon between. Close closes the endpoint, and the device if Open made
// it; afterwards every call that sends, polls or waits returns ErrClosed.
//
// Handlers and destinations: Handle puts a handler at an index the
// application chooses, Register at the next free one; a message names its
// handler by that index (HandlerID) and its destination by a connection
// index, the int that Token.Source returns for a request's sender.
// Request, RequestBuffered and Token.Reply send; Poll receives; Drain waits
// until every request is answered; Outstanding counts them per connection
// (the window is per connection). A request the responder has no handler
// for comes back to the error handler (OnReturn), SSAM's only return.
//
// Every request and answer carries a tag of its requester's session, so
// cells that a forger sends from the peer's MAC on the connection's
// circuits without knowing the session (random cells, made-up messages
// with good checksums, the first cells of PDUs that never end) are counted
// (Stats.Forged, BadCells, BadPDUs) and dropped, and never cost a real
// request its handler or stand for its answer; the bulk circuit's
// reassembly recovers a real PDU that such cells preceded. The tag keeps
// out blind forgeries only: it is no authentication against a forger who
// reads the wire.
//
// The wire format is in docs/wire.md ("SSAM Active Messages").
package ssam
