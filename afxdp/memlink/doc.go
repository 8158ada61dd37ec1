// Package memlink is an in-memory afxdp.Link: NewPair returns two ends joined
// by a pair of bounded queues, with optional seeded loss, duplication and
// reordering, so that the protocol layers (nicfw, am) can be tested without
// privileges, deterministically, and under faults that are hard to arrange
// on a real wire; NewHub returns a switch whose ports (Hub.Attach) join
// any number of hosts, each frame going to the port of its destination MAC
// address. The same test bodies also run over afxdp.Socket on veth (see
// afxdp's tests).
//
// An end behaves like a NIC queue: Send copies frames into the peer's
// receive queue and never blocks (a full queue drops, counted in the peer's
// Stats.RxRingFull); Recv lends frames from the end's own buffers until the
// next Recv; Wait sleeps on a channel until a frame arrives, the timeout
// passes, Wake is called or the end is closed. Closing one end does not
// close the other; frames sent to a closed end vanish, as on a cable to a
// host that went away. Nothing is allocated per frame.
package memlink
