package slurmtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// EnvMarker names the environment variable that marks every process a
// cluster starts (daemons, slurmstepd, the tasks of Srun's commands) with
// the cluster's folder, so that its cleanup finds them all.
const EnvMarker = "XAM_SLURMTEST"

// Commands are the programs Start needs, from Debian's munge, slurmctld,
// slurmd and slurm-client packages.
var Commands = []string{"munged", "slurmctld", "slurmd", "srun", "sinfo", "scancel"}

// Cluster is a running private Slurm cluster. Its fields are set by Start and
// stay valid until the test's cleanup.
type Cluster struct {
	Dir       string        // the cluster's folder, removed by the cleanup
	Conf      string        // path of slurm.conf: SLURM_CONF for the clients
	Nodes     []string      // node names, in the order of NodeName lines
	Partition string        // the default partition
	CtldPort  int           // slurmctld's TCP port on 127.0.0.1
	Started   time.Duration // how long Start took, from the first daemon to all nodes idle
}

// Option changes how Start builds a cluster.
type Option func(*config)

type config struct {
	nodes int
}

// WithNodes starts n virtual nodes n0...n(n-1), one slurmd each, instead of
// one node named after the machine.
func WithNodes(n int) Option { return func(c *config) { c.nodes = n } }

// Env returns the environment for a Slurm client of this cluster: the test's
// environment without Slurm's job variables (a test run inside a job must not
// leak its own job to srun), with SLURM_CONF and the cluster's marker.
func (c *Cluster) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SLURM_") || strings.HasPrefix(name, "PMI_") || strings.HasPrefix(name, "PMIX_") ||
			name == EnvMarker {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "SLURM_CONF="+c.Conf, EnvMarker+"="+c.Dir)
}

// Command returns a client command (srun, sinfo, squeue, scancel, scontrol...)
// of this cluster, run in its work folder with Env.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env()
	cmd.Dir = c.workDir()
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Srun returns `srun args...` for this cluster, not yet started: SLURM_CONF
// and the marker in its environment, the cluster's work folder as its
// working folder (the tasks start there). The caller may add to Env, set
// Stdout and Stderr, and runs it; a command still running when the test ends
// is killed by the cluster's cleanup.
func (c *Cluster) Srun(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return c.Command("srun", args...)
}

func (c *Cluster) workDir() string { return c.Dir + "/work" }

// String describes the cluster for logs.
func (c *Cluster) String() string {
	return fmt.Sprintf("slurm cluster %s (nodes %s, slurmctld on 127.0.0.1:%d)",
		c.Dir, strings.Join(c.Nodes, ","), c.CtldPort)
}
