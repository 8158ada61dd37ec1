package slurmtest

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStart: one node named after the machine runs a 4-task step with
// PMI-2's descriptor; after the cleanup nothing of the cluster is left.
func TestStart(t *testing.T) {
	var dir string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t)
		dir = c.Dir
		host, _ := os.Hostname()
		host, _, _ = strings.Cut(host, ".")
		if !slices.Equal(c.Nodes, []string{host}) {
			t.Errorf("nodes %v, want [%s]", c.Nodes, host)
		}
		out, err := c.Srun(t, "-n", "4", "--mpi=pmi2", "sh", "-c",
			`echo "$SLURM_PROCID $SLURM_NODEID $SLURM_STEP_NODELIST ${PMI_FD:+pmi}"`).Output()
		if err != nil {
			t.Fatalf("srun: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		slices.Sort(lines)
		want := []string{"0 0 " + host + " pmi", "1 0 " + host + " pmi", "2 0 " + host + " pmi", "3 0 " + host + " pmi"}
		if !slices.Equal(lines, want) {
			t.Errorf("tasks said %q, want %q", lines, want)
		}
	})
	if dir == "" {
		return
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", dir, err)
	}
	if pids := marked([]byte(EnvMarker + "=" + dir + "\x00")); len(pids) > 0 {
		t.Errorf("processes of the cluster left behind: %v", pids)
	}
}

// TestStartNodes: four virtual nodes each run their share of a step, with
// SLURM_NODEID 0..3 and the step's node list in Slurm's compressed form; a
// task still running when the test ends is killed by the cleanup.
func TestStartNodes(t *testing.T) {
	var dir string
	var hung chan struct{}
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, WithNodes(4))
		dir = c.Dir
		if !slices.Equal(c.Nodes, []string{"n0", "n1", "n2", "n3"}) {
			t.Errorf("nodes %v", c.Nodes)
		}
		out, err := c.Srun(t, "-N", "4", "-n", "8", "--ntasks-per-node=2", "sh", "-c",
			`echo "$SLURM_PROCID $SLURM_NODEID $SLURMD_NODENAME $SLURM_STEP_NODELIST"`).Output()
		if err != nil {
			t.Fatalf("srun: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		slices.Sort(lines)
		want := []string{"0 0 n0 n[0-3]", "1 0 n0 n[0-3]", "2 1 n1 n[0-3]", "3 1 n1 n[0-3]",
			"4 2 n2 n[0-3]", "5 2 n2 n[0-3]", "6 3 n3 n[0-3]", "7 3 n3 n[0-3]"}
		if !slices.Equal(lines, want) {
			t.Errorf("tasks said %q, want %q", lines, want)
		}
		// A step that would outlive the test: the cleanup ends it.
		hang := c.Srun(t, "-n", "2", "sh", "-c", "echo started; exec sleep 600")
		stdout, err := hang.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := hang.Start(); err != nil {
			t.Fatal(err)
		}
		hung = make(chan struct{})
		go func() { hang.Wait(); close(hung) }()
		if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
			t.Fatalf("the long step said %q, %v", line, err)
		}
	})
	if hung == nil {
		return
	}
	select {
	case <-hung:
	case <-time.After(time.Minute):
		t.Fatal("srun of the long step still runs after the cleanup")
	}
	if dir == "" {
		return
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", dir, err)
	}
	if pids := marked([]byte(EnvMarker + "=" + dir + "\x00")); len(pids) > 0 {
		t.Errorf("processes of the cluster left behind: %v", pids)
	}
}
