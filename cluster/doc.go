// Package cluster is the job: it learns who this task is and where its peers
// are from the launcher that started it, and gives the tasks a key-value
// space to exchange what they need (put, fence, get).
//
// # Launchers
//
// Join reads Slurm's environment (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_JOB_NODELIST,
// SLURM_JOB_ID, SLURM_STEP_ID; node lists in Slurm's compressed form, which
// ExpandHostlist expands) and connects to the PMI-2 server slurmstepd gives
// each task on PMI_FD when the step runs with `srun --mpi=pmi2` (package
// pmi2, pure Go). Outside a Slurm step, or without PMI-2, its error says
// what is missing and wraps ErrNoLauncher.
//
// FromHostfile is for a few machines without Slurm: a static file (see
// Hostfile) names each rank's node and device, and the tasks meet at a TCP
// rendezvous served by rank 0. Both give the same Job.
//
// # Ranks, nodes, host ids
//
// Job.Rank and Size number the tasks; Nodes are the job's nodes in order
// (Slurm: the step's, expanded), NodeID this task's node's index there,
// LocalRank its rank among the node's tasks. HostID is the node's index in
// the job's allocation (SLURM_JOB_NODELIST): every task of a node, in every
// step of the job, has the same one, so the tasks of a node share its
// firmware daemon and agree on its id.
//
// # Exchanging
//
// Put(key, value) publishes a value; Fence waits until every task has
// fenced, after which Get(rank, key) reads what rank put before it. A fence
// that some task never reaches (it died or hangs) fails after a timeout
// (the context's, or Job.FenceTimeout) with ErrFenceTimeout, rather than
// hang: Slurm itself would wait for ever. Exchange is the usual round: each
// task publishes its Card (node, MAC, host id, queue, daemon socket,
// endpoint ids) and gets everyone's. Abort ends the whole job: Slurm kills
// every task of the step.
//
// # Steps
//
// Under Slurm the key space is the step's: each step has a PMI-2 job of
// its own (PMI_JOBID JOBID.STEPID), and a value put and fenced in one step
// is not found by a task of another step of the same job, before or after
// its own fence (checked with Slurm 22.05). So an application's step does
// not learn its node daemon's socket from the daemons' step (`xam fw
// --job`, a step of its own); both compute it from the job id instead:
// Job.DaemonSocket, /run/xam/job-JOBID.sock.
//
// Keys and values are encoded for PMI-2 (kv.go): keys carry their owner's
// rank, since the key space is one for the whole step; values are
// percent-encoded, since Slurm 22.05's server cuts values at ';' (it does
// not read PMI-2's ";;" escape), and split into numbered pieces beyond
// PMI-2's 1024-byte value limit.
package cluster
