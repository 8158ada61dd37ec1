// Package am is AM-II's Active Messages API, on an endpoint of the firmware
// engine (nicfw). Each message names a handler that runs when it arrives;
// communication is request/reply: a request handler may send one reply, a
// reply handler sends nothing, which rules out deadlock without flow
// control in the network. SSAM's API is package am/ssam.
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
