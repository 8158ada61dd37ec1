// Package job opens xam's Active Messages endpoints from a parallel job
// (package cluster): one call per API gives a task an endpoint whose
// destinations are the job's ranks. OpenAMII gives an AM-II endpoint whose
// translation table names every rank (index r is rank r's endpoint);
// OpenGRIM a GRIM endpoint whose Peers are the ranks, so that the
// registry's central endpoint is rank 0's; OpenSSAM a device with an SSAM
// connection to every other rank. Every task of the job calls the same
// opens in the same order.
//
// # Modes
//
// Inline (Config.Mode Inline, or no Config.Socket): the task owns its
// node's device queue. It opens the data path on the device
// (datapath.Open on Config.Device, or the hostfile's device) and runs an
// engine of its own, whose host table maps every other node's host id to
// the MAC its task published. A queue has one owner, so an inline job runs
// one task per node; a node with two is refused (every rank's open says
// which node). AMII.DataPath is the node's data path: its XDP program
// (DataPath.Prog) injects faults for tests and experiments.
//
// Firmware (Config.Socket, or Mode Firmware with DefaultSocket): the
// node's `xam fw` daemon runs the engine, and every task of the node opens
// its endpoint through the daemon's socket (amii.Dial, grim.Dial). The
// daemon's host id must be the job's host id of its node
// (cluster.Job.HostID: its index in the job's allocation) and its host
// table must name every node of the job: `xam fw --job`, a step of the
// job, is started so; a daemon started otherwise is checked, and a wrong
// one named. Each task takes endpoint ids that are free on its daemon (see
// ids.go): those of other jobs on the node are left alone, so that several
// jobs share a node's daemon. SSAM has no daemon: OpenSSAM is inline only.
//
// # Opening, in step
//
// An open is a protocol between the tasks (round.go): they exchange their
// cards (cluster.Card: node, host id, MAC, socket, endpoint id; a fence),
// each opens its endpoint with the table built from the cards, and a
// second fence publishes how that went. It returns once every rank's
// endpoint exists, so that no early message comes back for want of an
// endpoint (ReasonNoEndpoint). When a task could not open, every rank's
// open fails with the same *OpenError, which names the rank, its node and
// its reason; when a task never comes, the first fence fails with
// cluster.ErrFenceTimeout after the context's deadline (or the job's
// FenceTimeout). A task whose open fails closes what it opened; the job
// should then end (cluster.Job.Abort, or exit).
//
// # The virtual network's tag
//
// Rank 0 draws each open's tag at random (64 bits from crypto/rand, never
// weak: daemon.NewTag) and gives it to the other ranks through the job's
// key-value space, with the cards. A tag hashed from the Slurm job id would
// also differ between jobs, but anybody on the cluster can read job ids
// (squeue) and so compute it: a tag is the capability that lets an
// endpoint into a virtual network (docs/security.md), and the job's
// key-value space reaches its own tasks only. So two jobs, or two steps of
// one job, on the same nodes are different networks: a message from one
// to the other's endpoints is returned to its sender (ReasonBadTag) and
// never delivered. Config.Tag gives a tag instead, for steps that must
// share one.
//
// # While running
//
// Barrier fences the job while it keeps serving its endpoint: a rank done
// with its work goes on answering ranks that are not, until every rank is
// at the barrier; a plain Fence would leave them waiting on a rank that
// no longer runs its engine (inline) or its handlers. Lost turns a
// returned message into a *Lost when its reason says the destination rank
// is gone (a task that died: its host unreachable after the transport's
// give-up time, its endpoint closed, no reply): the application then
// reports it and ends, rather than wait for it.
package job
