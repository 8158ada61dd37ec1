// Package daemon runs xam's NIC firmware engine (package nicfw) in firmware
// mode: as a daemon, AM-II's NIC processor on cores of its own, serving
// applications in other processes (Dial, Conn.Open). A Daemon owns one link (the device's AF_XDP queue) and one
// Engine, and runs the engine loop in one goroutine locked to its OS thread
// and, with Config.Cores, pinned to those CPUs (sched_setaffinity).
// The loop waits adaptively: without work it polls on, yielding the
// processor between polls to any thread that is ready (sched_yield), and
// after Config.Sleep without work (DefaultSleep, 200 µs) it sleeps in
// poll(2) on the link's socket and the daemon's wake eventfd, until a
// frame arrives, an application kicks it, a control request comes in or
// the timer scan is due. So a conversation is served at polling speed
// while an idle daemon takes no processor, and on a machine with fewer
// cores than daemons and applications the spinning gives way to the
// thread that has work. BusyPoll keeps the loop polling on a core of its
// own.
//
// Applications reach the daemon through its unix socket (SOCK_SEQPACKET).
// One connection is one application's session; its requests and replies
// are JSON messages (OpenRequest, CloseRequest, and their Reply), and
// the reply to an open carries three file descriptors (SCM_RIGHTS): the
// endpoint's memfd, which the application maps (endpoint.Map); the
// endpoint's notification eventfd, which the engine writes when a receive
// queue the application armed becomes non-empty (endpoint.View.Arm); and
// the daemon's wake eventfd, which the application writes to wake a
// sleeping engine (endpoint.View.SetKick). Applications never see the
// socket, the UMEM or other endpoints.
//
// Who may open what is decided by the peer's credentials (SO_PEERCRED and
// SO_PEERGROUPS), read when the connection is accepted: endpoint ids below
// FirstUserEndpoint are privileged (services such as a mapper) and only
// root or the daemon's own user may open them. A virtual network's tag is
// a capability that the daemon also guards (vnet_linux.go): an open with
// tag 0 makes a new network whose tag the daemon draws from crypto/rand
// (NewTag) and the reply carries; the user who opens a tag's first
// endpoint on the daemon is the network's creator there, and later opens
// of the tag are granted only to the creator's uid, to members of its
// groups, and to the uids and gids it granted (GrantRequest, Conn.Grant,
// `xam fw grant`); others get ErrPermission. Only root and the daemon's
// user may make a network with a weak tag (WeakTag; ErrWeakTag). Stats
// through the socket shows a user the tags of its own endpoints and
// networks only. Every user (by uid) has
// quotas: at most Config.MaxPerUser endpoints open, MaxConnsPerUser
// connections, and UserMemory bytes of endpoint memory; a request past one
// is refused with ErrQuota, to that client only. MaxConns bounds the
// connections of all users together. A connection past a bound is refused
// in the accepting goroutine (its reason written, the socket closed): a
// flood of them costs no goroutine and no buffer, and an idle connection
// holds no request buffer. An open request is checked
// whole (QueueEntries a power of two in 2..16384, StagingSize in
// MaxMedium..1 GiB, a table of 1..2^20 entries, a free id) before anything
// is made, and its memory is made in the connection's goroutine, never in
// the engine's: one user's large endpoint does not stall the engine for
// others. A refusal reaches the client as a typed error (ErrPermission,
// ErrQuota, ErrConfig, ErrEndpointInUse: errors.Is works across the
// socket). Endpoints live as long as their
// connection: when the application closes it, exits or dies, the kernel
// closes the socket and the daemon closes the connection's endpoints
// (Engine.CloseEndpoint); messages still arriving for them are returned to
// their senders as "endpoint closed". Nothing else is disturbed: the
// memory of a large endpoint is released off the engine's path
// (release_linux.go), its page tables dropped before the engine lets go of
// it and its pages freed after, in threads of low priority.
//
// The host table is static (Config.Hosts) or the mapper's (Config.Map):
// the daemon then loads the mapper into its engine as a module
// (mapper.Module), which speaks the mapper protocol on the engine's link,
// in the engine thread, and makes each table it adopts the engine's host
// table, this host's id included; the daemon keeps the table for its
// replies and Stats, and sleeps no longer than the engine's next timer
// (Engine.NextTimer). The daemon's mapper leads only if
// Config.Map.Privileged: the daemon runs as root, and no application
// endpoint can send a mapper frame (the engine sends unicast frames only),
// so only the daemon's privileged mapper speaks for the host.
//
// Stats lists the engine's modules (Config.Engine.Modules, the mapper's
// too) with the settings and counters of those that report them
// (nicfw.StatsReporter, read in the engine thread), and what the engine
// did for its modules: `xam fw stats` shows whether sender coordination
// is on, how it paces and what it did.
// It also carries what the engine counted per endpoint and per peer host
// (nicfw.EndpointInfo, nicfw.PeerInfo): messages, bytes, returns by
// reason, descriptors queued. Package nicfw/daemon/metrics exports it all
// to Prometheus (`xam fw --metrics`).
//
// Threads: the engine and its endpoints belong to the engine goroutine. A
// connection's goroutine hands it work as a function on a channel and
// writes the wake eventfd; the engine runs queued functions at the top of
// every loop.
package daemon
