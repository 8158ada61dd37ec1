package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/slurmtest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// elements is the tests' vector length, which four ranks do not divide.
const elements = 100003

// TestAllReduceUnderSlurm runs the example as a job of four tasks on four
// nodes of a private Slurm, each task in the namespace of its lab host and
// owning its device (inline mode): by srun, and by sbatch with
// allreduce.sbatch. Every rank's sum matches the serial computation.
func TestAllReduceUnderSlurm(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireCommand(t, "ip")
	testenv.RequireCommand(t, "sbatch")
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("ar%d", os.Getpid()), Hosts: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Errorf("removing the lab: %v", err)
		}
	})
	c := slurmtest.Start(t, slurmtest.WithNodes(4))
	ns := lab.Prefix + l.Name + "-h"
	t.Run("srun", func(t *testing.T) {
		script := fmt.Sprintf(`exec ip netns exec %s$SLURM_NODEID "$0"`, ns)
		cmd := c.Command("srun", "-N", "4", "--ntasks-per-node=1", "--mpi=pmi2", "sh", "-c", script, os.Args[0])
		cmd.Env = append(cmd.Env, argsEnv+fmt.Sprintf("=-n %d -repeat 2 -dev eth0", elements))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		t.Logf("srun: %v in %v\n%s%s", err, time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
		if err != nil {
			t.Fatal(err)
		}
		checkOutput(t, stdout.String(), 2)
	})
	t.Run("killed", func(t *testing.T) {
		// Rank 3 is killed three seconds into a long run: its left neighbour's
		// Store comes back once the transport gives up, and it ends the
		// job, saying why. That needs a Store on its way to rank 3 when it
		// dies or after. A kill that lands while the ranks wait at the
		// barrier between all-reduces, or just after rank 3 answered its
		// last Store, leaves nothing in flight towards it: the fence
		// timeout or the step timeout ends the job instead, saying that
		// a rank never came. Those runs are tried again, up to three.
		script := fmt.Sprintf(`[ "$SLURM_PROCID" != 3 ] || (sleep 3; kill -9 $$) & exec ip netns exec %s$SLURM_NODEID "$0"`, ns)
		const want = "aborts the job: allreduce: rank 3 (node n3) is gone: its messages came back"
		for try := 1; ; try++ {
			cmd := c.Command("srun", "-N", "4", "--ntasks-per-node=1", "--mpi=pmi2", "sh", "-c", script, os.Args[0])
			cmd.Env = append(cmd.Env, argsEnv+fmt.Sprintf("=-n %d -repeat 1000 -timeout 20s -dev eth0", elements))
			start := time.Now()
			out, err := cmd.CombinedOutput()
			d := time.Since(start)
			t.Logf("try %d: srun: %v in %v\n%s", try, err, d.Round(time.Millisecond), out)
			if err == nil {
				t.Fatal("the job succeeded without rank 3")
			}
			missed := !strings.Contains(string(out), want) &&
				(strings.Contains(string(out), "never reached the fence") || strings.Contains(string(out), "nothing from rank"))
			if missed && try < 3 {
				t.Logf("try %d: rank 3 died with nothing in flight to it; again", try)
				continue
			}
			if !strings.Contains(string(out), want) {
				t.Errorf("no %q", want)
			}
			if d > time.Minute {
				t.Errorf("the job took %v to end", d)
			}
			return
		}
	})
	t.Run("sbatch", func(t *testing.T) {
		// The script's program: this binary, in the task's lab host.
		dir := t.TempDir()
		app := filepath.Join(dir, "allreduce")
		wrapper := fmt.Sprintf("#!/bin/sh\n%s=\"$*\" exec ip netns exec %s$SLURM_NODEID %s\n", argsEnv, ns, os.Args[0])
		if err := os.WriteFile(app, []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "job.out")
		cmd := c.Command("sbatch", "--wait", "--output", out, "allreduce.sbatch")
		cmd.Dir, _ = os.Getwd()
		cmd.Env = append(cmd.Env, "XAM_MODE=inline", "XAM_DEV=eth0", fmt.Sprintf("XAM_ELEMENTS=%d", elements), "XAM_ALLREDUCE="+app)
		msg, err := cmd.CombinedOutput()
		b, _ := os.ReadFile(out)
		t.Logf("sbatch: %v: %s\nthe job's output:\n%s", err, msg, b)
		if err != nil {
			t.Fatal(err)
		}
		checkOutput(t, string(b), 3)
	})
}

// checkOutput checks that every rank's sum matched repeat times, and that
// rank 0 reported each all-reduce.
func checkOutput(t *testing.T, out string, repeat int) {
	t.Helper()
	for r := range 4 {
		want := fmt.Sprintf("rank %d: the sum of 4 ranks' %d elements matches the serial computation, %d times\n", r, elements, repeat)
		if !strings.Contains(out, want) {
			t.Errorf("no %q", want)
		}
	}
	for k := 1; k <= repeat; k++ {
		if want := fmt.Sprintf("all-reduce %d of %d float64 (0.8 MiB) on 4 ranks (inline mode): ", k, elements); !strings.Contains(out, want) {
			t.Errorf("rank 0 does not report %q", want)
		}
	}
}
