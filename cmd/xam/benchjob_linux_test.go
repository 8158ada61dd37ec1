package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/slurmtest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// TestBenchJob: `srun -N 4 --ntasks-per-node=1 xam bench all --job` on a
// private Slurm cluster, each task in a lab host of its own (four
// namespaces through a bridge stand for four machines): every experiment
// runs between the tasks, and rank 0's report names the four hosts, their
// devices and drivers, MTU, XDP and socket modes.
func TestBenchJob(t *testing.T) {
	const n = 4
	l, c, nsPrefix := jobLab(t, fmt.Sprintf("bjob%d", os.Getpid()), n)
	dir := t.TempDir()
	script := fmt.Sprintf("exec ip netns exec %s$SLURM_NODEID %s bench all --job --quick --dev %s --out %s",
		nsPrefix, os.Args[0], l.Hosts[0].Link, dir)
	cmd := c.Srun(t, "-N", fmt.Sprint(n), "--ntasks-per-node=1", "--mpi=pmi2", "sh", "-c", script)
	cmd.Env = append(cmd.Env, "XAM_TEST_AS_XAM=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("the step took %v:\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		if md, rerr := os.ReadFile(filepath.Join(dir, "report.md")); rerr == nil {
			t.Logf("report.md:\n%s", md)
		}
		t.Fatalf("the step: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Setup.Hosts) != n {
		t.Fatalf("the report names %d hosts, want %d: %+v", len(rep.Setup.Hosts), n, rep.Setup)
	}
	for i, h := range rep.Setup.Hosts {
		if h.Rank != i || h.Device != l.Hosts[0].Link || h.MAC != l.Hosts[i].MAC.String() || h.Driver != "veth" || h.MTU == 0 ||
			h.XDPMode == "" || h.XSKMode == "" || h.Kernel == "" || h.Addr == "" {
			t.Errorf("host %d: %+v", i, h)
		}
	}
	if rep.Failed != 0 || len(rep.Sections) != 1 {
		t.Errorf("%d failed, %d sections", rep.Failed, len(rep.Sections))
	}
	for _, s := range rep.Sections {
		for _, e := range s.Experiments {
			if e.Status != "ok" || e.Runs != bench.MinRuns || len(e.Figures) == 0 {
				t.Errorf("%s: %s (%s), %d runs, %d figures", e.Name, e.Status, e.Error, e.Runs, len(e.Figures))
			}
			for _, f := range e.Figures {
				if !f.Today.Measured() {
					t.Errorf("%s: %s not measured", e.Name, f.Name)
				}
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		t.Logf("report.md:\n%s", md)
	}
	checkBenchJobFails(t, c, nsPrefix)
	if !strings.Contains(string(md), "| rank | node | host id | device | driver |") || !strings.Contains(string(md), "### Round trips between two nodes (`xam bench all --job`)") {
		t.Errorf("report.md lacks the hosts' table or the experiments:\n%s", md)
	}
}

// checkBenchJobFails: a task that cannot open its device (the step's second node's) ends
// the step at once with its reason, rather than leave the others waiting
// at the first fence until its timeout.
func checkBenchJobFails(t *testing.T, c *slurmtest.Cluster, nsPrefix string) {
	t.Helper()
	script := fmt.Sprintf(`dev=eth0; [ "$SLURM_NODEID" = 1 ] && dev=nosuch0; exec ip netns exec %s$SLURM_NODEID %s bench all --job --quick --dev $dev --out %s`,
		nsPrefix, os.Args[0], t.TempDir())
	cmd := c.Srun(t, "-N", "2", "--ntasks-per-node=1", "--mpi=pmi2", "sh", "-c", script)
	cmd.Env = append(cmd.Env, "XAM_TEST_AS_XAM=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Errorf("a step with a missing device succeeded:\n%s", out)
	}
	// Slurm picks the step's two nodes from the four (n2 and n3 when an
	// earlier step's are not free yet): the one with the missing device
	// is the step's second (SLURM_NODEID 1), whatever its name.
	if want := regexp.MustCompile(`xam bench on (n[0-9]+): bench: device nosuch0 on node n[0-9]+: `); !want.Match(out) {
		t.Errorf("the step's output lacks %q:\n%s", want, out)
	}
	if took > time.Minute {
		t.Errorf("the step took %v to end", took)
	}
}

// TestBenchJobHostfile: `xam bench all --job --hostfile FILE --rank N` on
// two lab hosts, without Slurm: the ranks meet at rank 0's address, each
// takes its device from the file, and rank 0 writes the report.
func TestBenchJobHostfile(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("bjhf%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	dir := t.TempDir()
	hostfile := filepath.Join(dir, "hosts")
	text := fmt.Sprintf("rendezvous %s:7171\n0 h0 %s %s\n1 h1 %s %s\n", l.Hosts[0].Addr.Addr(), l.Hosts[0].Link, l.Hosts[0].MAC, l.Hosts[1].Link, l.Hosts[1].MAC)
	if err := os.WriteFile(hostfile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "report")
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, len(l.Hosts))
	for i, h := range l.Hosts {
		cmd := exec.Command("ip", "netns", "exec", h.NS, os.Args[0], "bench", "all", "--job", "--quick", "--hostfile", hostfile, "--rank", fmt.Sprint(i), "--out", out)
		cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
		go func() {
			b, err := cmd.CombinedOutput()
			done <- result{b, err}
		}()
	}
	for range l.Hosts {
		r := <-done
		if r.err != nil {
			t.Errorf("a rank: %v:\n%s", r.err, r.out)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Setup.Hosts) != 2 || rep.Setup.Hosts[1].Node != "h1" || rep.Failed != 0 {
		t.Errorf("report: hosts %+v, %d failed", rep.Setup.Hosts, rep.Failed)
	}
}
