// Package am holds xam's Active Messages APIs. Each message names a handler
// that runs when it arrives; communication is request/reply: a request
// handler may send one reply, a reply handler sends nothing, which rules
// out deadlock without flow control in the network.
//
// SSAM (ssam.go) is von Eicken et al.'s single-cell Active Messages over a
// driver.Device: 40 data bytes in one ATM cell with SSAM's 8-byte header,
// longer messages as AAL5 PDUs, and reliability in software — a window of
// W requests per connection, 2W preallocated buffers in the device's pinned
// send area, acks piggy-backed on replies or sent explicitly, go-back-N
// retransmission on a timer, duplicate requests answered from the saved
// reply without running the handler twice. Polling only: every send also
// polls, and Poll runs handlers for what has arrived. An SSAM endpoint is
// driven by one goroutine.
//
// AM-II (amii.go) is the API of an endpoint of the firmware engine
// (nicfw): short messages of up to 8 words as requests and replies, named
// by an index into the endpoint's virtual-network translation table, user
// credits (K outstanding requests), and an error handler that receives
// messages returned to the sender with a reason (bad tag, no such
// endpoint, unreachable host). Medium and bulk messages, blocking wait and
// firmware mode come next; GRIM's named handlers after them.
package am
