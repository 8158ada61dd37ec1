// Package slurmtest gives tests a private, real Slurm cluster on the one
// machine: Debian's munged, slurmctld and slurmd (22.05) started with a
// temporary configuration, so that `srun` launches real tasks through a real
// slurmstepd, with the PMI-2 descriptor and the environment a cluster gives.
//
// # Model
//
// Start installs nothing (scripts/deps.sh does) but requires root and the
// commands munged, slurmctld, slurmd, srun, sinfo and scancel
// (testenv.RequireCommand: a skip, or a failure under CI=true). It makes a
// temporary folder (mode 0755, as munged checks the path to its socket) and
// writes there everything the cluster owns:
//
//	slurm.conf          the configuration (SLURM_CONF for the clients)
//	munge/              munged's key (made fresh, random), socket, pid, seed and log
//	state/              slurmctld's StateSaveLocation
//	spool/NODE/         each slurmd's SlurmdSpoolDir (slurmstepd's sockets too)
//	log/                the daemons' log files and their standard output
//	work/               the working folder of srun, and so of the tasks
//
// The cluster has a munged of its own, run as user munge with a private key
// and socket (AuthInfo=socket=... in slurm.conf), so it neither needs nor
// disturbs a munged the machine may run, and two test processes never
// share one. slurmctld and each slurmd run in the foreground (-D) as child
// processes of the test, on TCP ports picked free on 127.0.0.1 for this
// cluster (chosen again, up to three times, when a daemon finds its port taken
// by then). Start returns once sinfo shows every node idle, and logs how long
// that took (about 0.2 s on a 2-vCPU machine).
//
// The configuration is the one checked on this machine kind:
// ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
// JobAcctGatherType=jobacct_gather/none, SelectType=select/cons_tres,
// MpiDefault=pmi2, SlurmdParameters=config_overrides (without it a node
// configured with more CPUs than the machine has is marked invalid), nodes of
// 8 CPUs each and a partition with OverSubscribe=FORCE:8, so that several
// steps and jobs share the CPUs.
//
// # Nodes
//
// With one node (the default) the node is named after the machine (its short
// host name), as on a real cluster. WithNodes(n) starts n virtual nodes
// n0...n(n-1) instead: one ordinary slurmd per node, started with `-N nK`,
// each node declared with NodeHostname=localhost, NodeAddr=127.0.0.1 and a
// Port of its own. A step over several nodes then has SLURM_NODEID 0..n-1,
// SLURM_STEP_NODELIST "n[0-3]", a slurmstepd per node and PMI-2's tree
// between them, all on this machine.
//
// Debian's slurm-wlm-emulator is not used: its slurmctld and slurmd are built
// for a front-end cluster (slurmctld stops with "No front end nodes defined"),
// while the shared library they load (libslurmfull, from the ordinary build)
// rejects FrontendName in slurm.conf ("Use of FrontendName in slurm.conf
// without Slurm being configured/built with the --enable-front-end option"),
// so it cannot run at all with 22.05.8; installing it also switches the
// slurmd and slurmctld alternatives to its binaries. The ordinary slurmd's -N
// gives the virtual nodes instead.
//
// # Cleanup
//
// The test's Cleanup, whether the test passes, fails or stops early, cancels
// the cluster's jobs, stops slurmd, slurmctld and munged (SIGTERM, then
// SIGKILL after a few seconds), kills whatever the cluster started that still
// runs (slurmstepd, tasks: every process whose environment names the
// cluster's folder in XAM_SLURMTEST, which the daemons and Srun's commands
// carry) and removes the folder. When the test failed, it first logs the end
// of each daemon's log.
//
//	c := slurmtest.Start(t, slurmtest.WithNodes(4))
//	out, err := c.Srun(t, "-N", "4", "-n", "8", "--mpi=pmi2", "hostname").CombinedOutput()
package slurmtest
