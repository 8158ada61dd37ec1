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
// (nicfw): requests and replies named by an index into the endpoint's
// virtual-network translation table, short (up to 8 words), medium (up to
// 8 KB, copied once into a staging slot at the sender and handed to the
// handler in place at the receiver) and bulk (Store: a region of the
// staging area written into a region of the receiver's), user credits (K
// outstanding requests), an error handler that receives messages returned
// to the sender with a reason (bad tag, no such endpoint, endpoint closed,
// unreachable host, region out of range, no such handler), and Wait, which in inline mode
// runs the engine until a message is there and in firmware mode blocks on
// the endpoint's notification (AMIIConfig.Block). Dial opens an endpoint
// through a firmware daemon's socket. An AMII belongs to one goroutine, or,
// with AMIIConfig.Shared, may be used by several at once (amii.go,
// "Threads"). GRIM's named handlers come next.
package am
