package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/xam-project/xam/cluster/pmi2"
)

// abortWait is how long Abort waits for Slurm to kill the step.
const abortWait = 10 * time.Second

// Join learns the job from the launcher that started this process: Slurm's
// environment (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
// SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID) and
// the PMI-2 server on PMI_FD (srun --mpi=pmi2), whose fullinit must agree.
// Outside a Slurm step, or without PMI-2, the error (wrapping
// ErrNoLauncher) says what is missing. ctx bounds the handshake.
func Join(ctx context.Context) (*Job, error) {
	return join(ctx, os.Getenv)
}

// join is Join reading the environment through getenv.
func join(ctx context.Context, getenv func(string) string) (*Job, error) {
	j, err := slurmEnv(getenv)
	if err != nil {
		return nil, err
	}
	fd, jobID, err := pmiEnv(getenv, j)
	if err != nil {
		return nil, err
	}
	c, err := pmi2.Open(ctx, fd, jobID, j.Rank)
	if err != nil {
		return nil, fmt.Errorf("cluster: PMI-2 on PMI_FD=%d: %w", fd, err)
	}
	if c.Rank != j.Rank || c.Size != j.Size {
		c.Close()
		return nil, fmt.Errorf("cluster: PMI-2 says rank %d of %d, Slurm's environment rank %d of %d", c.Rank, c.Size, j.Rank, j.Size)
	}
	j.SpawnerJobID = c.SpawnerJobID
	j.kv = &pmiBackend{c: c}
	return j, nil
}

// slurmEnv reads the task's place in the step from Slurm's variables.
func slurmEnv(getenv func(string) string) (*Job, error) {
	j := &Job{Launcher: "slurm"}
	if getenv("SLURM_PROCID") == "" || getenv("SLURM_STEP_NODELIST") == "" {
		if id := first(getenv, "SLURM_JOB_ID", "SLURM_JOBID"); id != "" {
			return nil, fmt.Errorf("%w: in Slurm job %s but not in a step started by srun "+
				"(SLURM_PROCID or SLURM_STEP_NODELIST is not set: a batch script?); "+
				"start the tasks with `srun --mpi=pmi2`", ErrNoLauncher, id)
		}
		return nil, fmt.Errorf("%w: not in a Slurm job step: SLURM_PROCID is not set; "+
			"run under `srun --mpi=pmi2`, or use a hostfile (cluster.FromHostfile)", ErrNoLauncher)
	}
	var err error
	ints := []struct {
		dst   *int
		names []string
	}{
		{&j.Rank, []string{"SLURM_PROCID"}},
		{&j.Size, []string{"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}},
		{&j.LocalRank, []string{"SLURM_LOCALID"}},
		{&j.NodeID, []string{"SLURM_NODEID"}},
	}
	for _, v := range ints {
		if *v.dst, err = envInt(getenv, v.names...); err != nil {
			return nil, err
		}
	}
	if j.Size < 1 || j.Rank >= j.Size {
		return nil, fmt.Errorf("cluster: SLURM_PROCID=%d is not a rank of SLURM_NTASKS=%d tasks", j.Rank, j.Size)
	}
	if j.JobID = first(getenv, "SLURM_JOB_ID", "SLURM_JOBID"); j.JobID == "" {
		return nil, fmt.Errorf("cluster: SLURM_JOB_ID is not set (Slurm sets it for every task of a job)")
	}
	j.StepID = first(getenv, "SLURM_STEP_ID", "SLURM_STEPID")
	list := getenv("SLURM_STEP_NODELIST")
	if j.Nodes, err = nodeList("SLURM_STEP_NODELIST", list); err != nil {
		return nil, err
	}
	if j.NodeID >= len(j.Nodes) {
		return nil, fmt.Errorf("cluster: SLURM_NODEID=%d but SLURM_STEP_NODELIST=%q has %d nodes", j.NodeID, clip(list), len(j.Nodes))
	}
	j.Node = j.Nodes[j.NodeID]
	if name := getenv("SLURMD_NODENAME"); name != "" && name != j.Node {
		return nil, fmt.Errorf("cluster: SLURMD_NODENAME=%s but node %d of SLURM_STEP_NODELIST is %s", name, j.NodeID, j.Node)
	}
	j.HostID = j.NodeID
	if jl := getenv("SLURM_JOB_NODELIST"); jl != "" {
		all, err := nodeList("SLURM_JOB_NODELIST", jl)
		if err != nil {
			return nil, err
		}
		if j.HostID = slices.Index(all, j.Node); j.HostID < 0 {
			return nil, fmt.Errorf("cluster: node %s of the step is not in SLURM_JOB_NODELIST=%q", j.Node, clip(jl))
		}
	}
	return j, nil
}

// nodeList expands a node list variable; its names must be distinct.
func nodeList(name, list string) ([]string, error) {
	nodes, err := ExpandHostlist(list)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", name, err)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n] {
			return nil, fmt.Errorf("cluster: %s=%q names node %s twice", name, clip(list), n)
		}
		seen[n] = true
	}
	return nodes, nil
}

// pmiEnv reads PMI-2's variables: the descriptor and the PMI job id, after
// checking PMI_RANK and PMI_SIZE against Slurm's.
func pmiEnv(getenv func(string) string, j *Job) (fd int, jobID string, err error) {
	if getenv("PMI_FD") == "" {
		why := ""
		if t := getenv("SLURM_MPI_TYPE"); t != "" && t != "pmi2" {
			why = fmt.Sprintf(" (this step was started with --mpi=%s)", t)
		}
		return 0, "", fmt.Errorf("%w: PMI_FD is not set: srun was not given --mpi=pmi2 (or MpiDefault=pmi2 in slurm.conf)%s, "+
			"so this task has no PMI-2 server to exchange through", ErrNoLauncher, why)
	}
	if fd, err = envInt(getenv, "PMI_FD"); err != nil {
		return 0, "", err
	}
	for _, v := range []struct {
		name string
		want int
	}{{"PMI_RANK", j.Rank}, {"PMI_SIZE", j.Size}} {
		if getenv(v.name) == "" {
			continue
		}
		n, err := envInt(getenv, v.name)
		if err != nil {
			return 0, "", err
		}
		if n != v.want {
			return 0, "", fmt.Errorf("cluster: %s=%d but Slurm's environment says %d", v.name, n, v.want)
		}
	}
	if jobID = getenv("PMI_JOBID"); jobID == "" {
		jobID = j.JobID + "." + j.StepID
	}
	return fd, jobID, nil
}

// envInt reads the first set of names as a number >= 0.
func envInt(getenv func(string) string, names ...string) (int, error) {
	for _, name := range names {
		s := getenv(name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("cluster: %s=%q is not a number >= 0", name, clip(s))
		}
		return n, nil
	}
	return 0, fmt.Errorf("cluster: %s is not set (Slurm sets it for every task of a step)", names[len(names)-1])
}

// first returns the value of the first set of names.
func first(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// pmiBackend is the key-value space of a Slurm step, through PMI-2.
type pmiBackend struct {
	c *pmi2.Client
}

func (b *pmiBackend) put(ctx context.Context, key, value string) error {
	if err := b.c.Put(ctx, key, value); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

func (b *pmiBackend) fence(ctx context.Context) error {
	if err := b.c.Fence(ctx); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

func (b *pmiBackend) get(ctx context.Context, _ int, key string) (string, bool, error) {
	v, ok, err := b.c.Get(ctx, key)
	if err != nil {
		return "", false, fmt.Errorf("cluster: %w", err)
	}
	return v, ok, nil
}

// abort asks Slurm to kill the step, and waits to be killed.
func (b *pmiBackend) abort(msg string) error {
	if err := b.c.Abort(msg); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	time.Sleep(abortWait)
	return fmt.Errorf("cluster: Slurm did not end the step within %v of the abort", abortWait)
}

func (b *pmiBackend) close(ctx context.Context) error {
	if err := b.c.Finalize(ctx); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}
