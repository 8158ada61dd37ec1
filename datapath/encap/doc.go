// Package encap carries xam's frames in UDP over IPv4 or IPv6 (xam's UDP
// form, docs/wire.md), so that they cross routers and run on networks that
// carry only IP: cloud vNICs, NICs that steer only IP flows.
//
// # Model
//
// A UDP is an afxdp.Link over another (an AF_XDP socket on the device):
// the protocol layers above it see the same Ethernet-shaped frames as on
// a raw link, addressed by 6-byte addresses, and never an IP header.
// Below it, every frame is Ethernet to the next hop, IP from this host's
// address to the peer's, UDP from the port to the port, then the frame
// header and cells.
//
// A host's xam address in the UDP form is a function of its IP address
// (Addr): 02:75 followed by the IPv4 address, or 06 followed by 40 bits of
// SHA-256 of the IPv6 address. Every host computes the same address for a
// peer, so that host tables, job cards and daemons' --host flags carry
// addresses as they carry MACs on a raw link; an IPv6 address is known to
// the process once Addr has computed it, and to a UDP once a frame has
// come from it (at most Config.MaxLearned such). An address is its first
// IP's: frames from another IP whose hash matches are dropped, as are
// frames of the other family or to another destination than
// Config.Local; cells.ParseUDP refuses an IPv4-mapped address (counted as
// malformed).
//
// # Next hops
//
// The Ethernet destination of a frame is the MAC of the next hop toward
// the peer: the kernel's route to the peer (its gateway, or the peer on
// the same subnet) and the kernel's neighbour entry for that hop, read
// over netlink in the device's namespace. A UDP subscribes to the
// kernel's route and neighbour changes and looks again when they come (and
// every 5 s), so that a router replaced, a gateway changed or a
// neighbour's new MAC is followed; while a hop has no neighbour entry, or a
// stale one, the UDP makes the kernel resolve or confirm it (a datagram to
// the peer's discard port through the kernel); frames to a peer without a
// hop, or whose route leaves by another device, are dropped and counted
// (Stats.Unresolved), the loss a sender's retransmission covers, as it
// covers a lost frame.
//
// # The port
//
// All hosts of a job use one UDP port (Config.Port, default
// cells.DefaultUDPPort). A UDP holds the port on its address with a kernel
// socket for as long as it is open, so no program of the host takes it
// there, and the XDP program (loader.Config.UDPPort and UDPLocal) steers
// datagrams to that address and port to it, passing every other one to
// the kernel.
package encap
