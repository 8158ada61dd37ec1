package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/slurmtest"
)

// srunTasks runs `srun args... <this test binary>` in mode with the
// cluster, and returns its standard output and error.
func srunTasks(t *testing.T, c *slurmtest.Cluster, mode string, env []string, args ...string) (string, string, error) {
	t.Helper()
	return runTasks(t, c, mode, env, "srun", args...)
}

// runTasks runs `name args... <this test binary>` (srun, or salloc ... srun).
func runTasks(t *testing.T, c *slurmtest.Cluster, mode string, env []string, name string, args ...string) (string, string, error) {
	t.Helper()
	cmd := c.Command(name, append(args, os.Args[0])...)
	cmd.Env = append(cmd.Env, append(env, taskEnv+"="+mode)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s (%s): %v in %v\nstderr:\n%s", name, strings.Join(args, " "), mode, err,
		time.Since(start).Round(time.Millisecond), stderr.String())
	return stdout.String(), stderr.String(), err
}

// checkExchange checks the reports of an exchange step: every rank saw
// every other's values and cards, and the node facts agree: perNode ranks
// on each of nodes, whose host ids start at hostBase.
func checkExchange(t *testing.T, reps []taskReport, nodes []string, perNode, hostBase int) {
	t.Helper()
	size := len(reps)
	for r, rep := range reps {
		if rep.Size != size || !slices.Equal(rep.Nodes, nodes) {
			t.Errorf("rank %d: size %d, nodes %v; want %d, %v", r, rep.Size, rep.Nodes, size, nodes)
		}
		if wantNode := r / perNode; rep.NodeID != wantNode || rep.HostID != hostBase+wantNode || rep.Node != nodes[wantNode] ||
			rep.LocalRank != r%perNode {
			t.Errorf("rank %d: node %s (id %d, host id %d), local rank %d; want %s (%d), local rank %d",
				r, rep.Node, rep.NodeID, rep.HostID, rep.LocalRank, nodes[wantNode], wantNode, r%perNode)
		}
		if rep.JobID != reps[0].JobID || rep.JobID == "" {
			t.Errorf("rank %d: job %q, rank 0 says %q", r, rep.JobID, reps[0].JobID)
		}
		for o := range size {
			if rep.Values[o] != greeting(o) {
				t.Errorf("rank %d got %q from rank %d, want %q", r, rep.Values[o], o, greeting(o))
			}
			if !rep.Big[o] {
				t.Errorf("rank %d: rank %d's 5000-byte value did not arrive whole", r, o)
			}
		}
		if len(rep.Cards) != size {
			t.Errorf("rank %d: %d cards", r, len(rep.Cards))
			continue
		}
		for o, card := range rep.Cards {
			h := hostBase + o/perNode
			want := Card{Rank: o, Node: nodes[o/perNode], HostID: h, MAC: fmt.Sprintf("02:00:00:00:00:%02x", h),
				Queue: o % perNode, Socket: fmt.Sprintf("/run/xam/fw-%d.sock", h), Endpoints: []uint32{uint32(100 + o)}}
			if fmt.Sprint(card) != fmt.Sprint(want) {
				t.Errorf("rank %d's card of rank %d: %+v, want %+v", r, o, card, want)
			}
		}
	}
}

// TestSlurmExchange: four tasks on one node under the real slurmstepd Join,
// put (values with ';', '%', a newline, and 5000 bytes of every byte value),
// fence, get every rank's values and exchange cards.
func TestSlurmExchange(t *testing.T) {
	c := slurmtest.Start(t)
	dir := t.TempDir()
	out, _, err := srunTasks(t, c, "exchange", []string{outEnv + "=" + dir}, "-n", "4", "--mpi=pmi2")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	checkExchange(t, readReports(t, dir, 4), c.Nodes, 4, 0)
}

// TestSlurmExchangeNodes: eight tasks on four virtual nodes, two per node:
// PMI-2's fence crosses slurmstepd's tree between the nodes; node ids, host
// ids and local ranks follow the nodes.
func TestSlurmExchangeNodes(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.WithNodes(4))
	dir := t.TempDir()
	out, _, err := srunTasks(t, c, "exchange", []string{outEnv + "=" + dir}, "-N", "4", "-n", "8", "--ntasks-per-node=2", "--mpi=pmi2")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	checkExchange(t, readReports(t, dir, 8), c.Nodes, 2, 0)

	// A step on the last two nodes of a four-node job: node ids count the
	// step's nodes, host ids the job's, so that steps of one job agree.
	dir = t.TempDir()
	out, _, err = runTasks(t, c, "exchange", []string{outEnv + "=" + dir}, "salloc", "-N", "4", "--ntasks-per-node=2",
		"srun", "-N", "2", "-n", "4", "-w", "n[2-3]", "--mpi=pmi2")
	if err != nil {
		t.Fatalf("salloc: %v\n%s", err, out)
	}
	checkExchange(t, readReports(t, dir, 4), []string{"n2", "n3"}, 2, 2)
}

// TestSlurmAbort: rank 1 aborts; Slurm kills every task of the step, the
// message is on srun's standard error and srun fails, well before the
// fence the others wait in would time out.
func TestSlurmAbort(t *testing.T) {
	c := slurmtest.Start(t)
	start := time.Now()
	out, stderr, err := srunTasks(t, c, "abort", nil, "-n", "4", "--mpi=pmi2")
	if err == nil {
		t.Fatalf("srun succeeded after an abort:\n%s", out)
	}
	for _, want := range []string{"xam: rank 1 aborts the job: rank 1 gives up", "CANCELLED", "tasks 0-3: Killed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("srun's standard error lacks %q", want)
		}
	}
	if strings.Contains(stderr, "still alive") || strings.Contains(stderr, "the fence after the abort ended") {
		t.Errorf("a task outlived the abort")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the step took %v to end after the abort", d)
	}
}

// TestSlurmFenceTimeout: the last rank leaves without fencing, or hangs;
// Slurm leaves the others waiting in their fence, which fails with
// ErrFenceTimeout. With --kill-on-bad-exit their failure ends the step, the
// hanging task too.
func TestSlurmFenceTimeout(t *testing.T) {
	c := slurmtest.Start(t)
	for _, mode := range []string{"fence-timeout", "fence-hang"} {
		t.Run(mode, func(t *testing.T) {
			start := time.Now()
			out, stderr, err := srunTasks(t, c, mode, []string{"XAM_CLUSTER_TEST_FENCE=3s"},
				"-n", "4", "--mpi=pmi2", "--kill-on-bad-exit=1")
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("srun: %v, want the tasks' failure\n%s", err, out)
			}
			t.Logf("the ranks said:\n%s", out)
			// The three waiting ranks time out together, and the first to
			// exit has Slurm kill the others (--kill-on-bad-exit): on a
			// loaded machine one may be killed before it reports.
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if out == "" || len(lines) > 3 {
				t.Fatalf("%d ranks reported, want 1 to 3 of the 3 that wait:\n%s", len(lines), out)
			}
			for _, l := range lines {
				if !strings.Contains(l, "cluster: fence timed out after 3") || !strings.Contains(l, "never reached the fence") {
					t.Errorf("a rank said %q, want the fence's timeout", l)
				}
			}
			if !strings.Contains(stderr, "Exited with exit code 3") {
				t.Errorf("srun did not report the tasks' failure")
			}
			if d := time.Since(start); d > time.Minute {
				t.Errorf("the step took %v to end", d)
			}
		})
	}
}

// TestSlurmNoPMI: a step without PMI-2 (--mpi=none) says so.
func TestSlurmNoPMI(t *testing.T) {
	c := slurmtest.Start(t)
	out, _, err := srunTasks(t, c, "exchange", nil, "-n", "1", "--mpi=none")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("srun: %v, want exit status 2\n%s", err, out)
	}
	want := "PMI_FD is not set: srun was not given --mpi=pmi2 (or MpiDefault=pmi2 in slurm.conf)"
	if !strings.Contains(out, want) {
		t.Errorf("the task said %q, want %q", out, want)
	}
}
