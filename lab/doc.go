// Package lab builds xam's test networks out of network namespaces and veth
// links, with netlink (never by running `ip`): a lab is N host namespaces
// joined point to point (two hosts) or in a star through a "switch"
// namespace holding a Linux bridge with static FDB entries and, optionally,
// a token-bucket filter (tbf) on each switch port to emulate a switch's
// limited output buffers; or (Config.Routed) each on a subnet of its own,
// joined by a router namespace whose kernel forwards IPv4 and IPv6
// between them, for xam's UDP form across a router.
//
// # Names
//
// A lab named X consists of the namespaces "xam-X-h0", "xam-X-h1", ... and,
// with a switch, "xam-X-sw", mounted under /run/netns as `ip netns add`
// does, so that `ip netns exec xam-X-h0 ...` works on them too. Each host's
// interface is "eth0" with the IPv4 address 10.0.0.(i+1)/24; the switch's
// ports are "p0", "p1", ... on bridge "br0". In a routed lab, the
// router is "xam-X-rt" with ports "r0", "r1", ...; host i is
// 10.0.(i+1).1/24 and fd00:0:0:(i+1)::1/64 behind port ri (.254, ::fe).
// Down removes one by name and
// DownAll every lab, found by the "xam-" prefix.
//
// # Owners
//
// A lab built for a run (a ping, a benchmark, a test) belongs to the
// process that built it, which holds an exclusive flock on
// /run/xam/labs/NAME.owner while it lives; the kernel lets go of the lock
// however the process ends. A lab whose lock nobody holds is Stale, the
// leftover of a run that was killed or crashed, and DownStale (`xam lab
// down --stale`) removes exactly those, never a lab a live process uses. A
// Persistent lab (`xam lab up`) has no owner and stays until removed by
// name.
//
// # Daemons
//
// A persistent lab may run a process on each host for as long as it
// stands (`xam lab up --fw`: a firmware daemon per host). StartDaemon
// starts one detached from its caller (a process group of its own,
// output to a log) and records its pid and start time in the lab's state dir,
// /run/xam/labs/NAME (StateDir), beside its log and socket; Daemons lists
// them with whether each still runs (a pid reused by another process does
// not count); StopDaemons stops them (SIGTERM, then SIGKILL after a
// grace, through pidfds, so no stranger is signalled) and removes the
// state dir, reporting those that had died early with the end of their
// logs. Down stops a lab's daemons before it removes its namespaces.
//
// # Threads
//
// A network namespace belongs to an OS thread, and a socket to the namespace
// it was created in, for life. Namespace.Do runs a function on a goroutine
// locked to its own thread, switched into the namespace and back; sockets
// created there are then used from any goroutine. A thread that cannot be
// switched back is never returned to the scheduler: its goroutine exits
// locked and the runtime ends the thread.
package lab
