// Package mapper finds the hosts on one Ethernet segment and agrees on a
// host table with them: AM-II's mapper daemon, reduced to one L2 segment
// (no routes to compute: every host reaches every other directly).
//
// # Model
//
// Every host runs a Mapper on its link. Each one broadcasts a PROBE every
// Config.ProbeInterval announcing its MAC, its queue and whether it is
// privileged. A host not heard from for Config.DeadAfter has vanished.
//
// The leader is the live privileged host with the lowest MAC, as each
// mapper sees it. A mapper that is the leader builds the host table from
// the hosts it hears (itself included) and broadcasts it in a TABLE message
// at once when the table changes and then every ProbeInterval in place of
// its PROBE. Every other mapper adopts the newest table (by epoch) from the
// host it takes for the leader and ignores tables from anyone else; when
// the leader vanishes, the next lowest privileged MAC takes over, with an
// epoch above every epoch it has seen. A mapper that is not privileged
// (Config.Privileged false) never sends a TABLE and never becomes the
// leader: it probes, listens and adopts.
//
// Ids are stable: a host keeps its id for as long as it stays in the
// table, whoever leads, so that names built from ids (nicfw's virtual
// networks) keep meaning the same host. A leader numbers from the newest
// table it holds or has heard: hosts in it keep their ids, new hosts take
// the lowest free ids in MAC order (on a fresh segment, 0, 1, ... in MAC
// order). A mapper listens for 1.25 probe intervals before it first leads,
// and a mapper that built the table it holds keeps announcing it after a
// lower MAC took over, until it adopts the new leader's table: so a leader
// that joins an established segment learns the ids in use before it
// numbers. A vanished host's id becomes free and may be given to a host
// that joins later; users of the table follow Config.OnChange (or the
// table's Epoch).
//
// "Privileged" is a local decision (only a privileged endpoint may run a
// mapper that leads); the wire carries the flag without authentication, as
// AM-II's mapper trusted the hosts of its cluster.
//
// # Wire format
//
// Mapper messages are AAL5 PDUs on circuit 0/16 (VPI/VCI; Config.VPI and
// Config.VCI change it), one whole PDU per xam frame, sent to the Ethernet
// broadcast address: a version, the type (PROBE or TABLE), flags, the
// sender's MAC and queue, an epoch, and for a TABLE its entries (host id,
// MAC, queue). The table is in docs/wire.md ("The mapper").
//
// A TABLE comes from a privileged sender and lists its hosts with distinct
// ids in strictly ascending MAC order. A frame that breaks any of these rules,
// or whose framing or AAL5 check fails, is counted (Stats.Truncated for a
// message shorter than its header or its entries, Stats.Malformed for the
// rest) and dropped. xam frames on other circuits, and frames of other
// EtherTypes, are counted in Stats.Ignored.
//
// # Threads
//
// Poll belongs to one goroutine (the mapper owns its link's receive and
// send sides). Table, Leader and Stats may be called from any goroutine;
// they return what the last Poll published. Config.OnChange runs in Poll's
// goroutine.
package mapper
