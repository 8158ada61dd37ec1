package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/internal/slurmtest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/nicfw/daemon"
)

// nodes is the number of nodes of the tests' jobs: lab hosts h0..h3 stand
// for Slurm's virtual nodes n0..n3, whose host ids are 0..3.
const nodes = 4

var labs atomic.Int32

// testLab builds a lab of four hosts through a switch, named for this
// process, and removes it (daemons and all) when the test ends.
func testLab(t *testing.T) *lab.Lab {
	t.Helper()
	testenv.RequirePrivileged(t)
	testenv.RequireCommand(t, "ip")
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("j%d_%d", os.Getpid(), labs.Add(1)), Hosts: nodes})
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Errorf("removing lab %s: %v", l.Name, err)
		}
	})
	return l
}

// step is a run of this test binary as the tasks of a job: srun with args,
// each task in the namespace of its node's lab host.
type step struct {
	mode string
	env  []string
	args []string
}

// command returns the step's srun, not started: each task enters its
// node's lab host (ip netns exec; the PMI descriptor survives the exec)
// and runs this binary as a task of the given mode.
func (s step) command(c *slurmtest.Cluster, l *lab.Lab) *exec.Cmd {
	script := fmt.Sprintf(`exec ip netns exec %s-h$SLURM_NODEID "$0"`, lab.Prefix+l.Name)
	args := append(append([]string{"--mpi=pmi2"}, s.args...), "sh", "-c", script, os.Args[0])
	cmd := c.Command("srun", args...)
	cmd.Env = append(cmd.Env, append(s.env, taskEnv+"="+s.mode)...)
	return cmd
}

// run runs the step and returns its standard output and error.
func (s step) run(t *testing.T, c *slurmtest.Cluster, l *lab.Lab) (string, string, time.Duration, error) {
	t.Helper()
	cmd := s.command(c, l)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	t.Logf("srun %s (%s): %v in %v\nstdout:\n%sstderr:\n%s", strings.Join(s.args, " "), s.mode, err,
		d.Round(time.Millisecond), stdout.String(), stderr.String())
	return stdout.String(), stderr.String(), d, err
}

// tasks is srun's task layout: n tasks on the four nodes.
func tasks(n int) []string {
	return []string{"-N", strconv.Itoa(nodes), "-n", strconv.Itoa(n), "--ntasks-per-node=" + strconv.Itoa(n/nodes)}
}

// readReports reads the reports of size tasks from dir, by rank.
func readReports(t *testing.T, dir string, size int) []report {
	t.Helper()
	reps := make([]report, size)
	for r := range reps {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatalf("rank %d's report: %v", r, err)
		}
		if err := json.Unmarshal(b, &reps[r]); err != nil || reps[r].Rank != r {
			t.Fatalf("rank %d's report %q: %v", r, b, err)
		}
	}
	return reps
}

// runAllToAll runs a step of the all-to-all in mode (amii, grim, ssam) with
// n requests from each rank to each other, and checks that every request
// was handled once and every reply received once; it returns the
// reports.
func runAllToAll(t *testing.T, c *slurmtest.Cluster, l *lab.Lab, mode string, size, n int, env ...string) []report {
	t.Helper()
	dir := t.TempDir()
	env = append(env, outEnv+"="+dir, countEnv+"="+strconv.Itoa(n))
	if _, _, _, err := (step{mode: mode, env: env, args: tasks(size)}).run(t, c, l); err != nil {
		t.Fatalf("srun: %v", err)
	}
	reps := readReports(t, dir, size)
	want := n * (size - 1)
	var slowest float64
	var received, dropped uint64
	for r, rep := range reps {
		received, dropped = received+rep.Received, dropped+rep.Dropped
		if rep.Handled != want || rep.Dups != 0 || rep.Strays != 0 || rep.Replies != want || rep.DupReplies != 0 || len(rep.Returned) != 0 {
			t.Errorf("rank %d: handled %d (duplicates %d, strays %d), replies %d (duplicates %d), returned %v; want %d once each",
				r, rep.Handled, rep.Dups, rep.Strays, rep.Replies, rep.DupReplies, rep.Returned, want)
		}
		if rep.HostID != r/(size/nodes) || rep.Node != fmt.Sprintf("n%d", r/(size/nodes)) {
			t.Errorf("rank %d: node %s, host id %d", r, rep.Node, rep.HostID)
		}
		if mode != "ssam" && (rep.Tag != reps[0].Tag || rep.Tag == 0 || !slices.Equal(rep.Table, reps[0].Table)) {
			t.Errorf("rank %d: tag %#x, table %v; rank 0's %#x, %v", r, rep.Tag, rep.Table, reps[0].Tag, reps[0].Table)
		}
		slowest = max(slowest, rep.Seconds)
	}
	t.Logf("%s all-to-all, %d ranks, %d requests from each to each: %d requests answered in %.3f s, %.0f/s; "+
		"the nodes' XDP programs dropped %d of %d frames", mode, size, n, size*want, slowest, float64(size*want)/slowest, dropped, received)
	if slices.Contains(env, lossEnv+"=0.05") && dropped < received/50 {
		t.Errorf("%d of %d frames dropped, want about 5%%", dropped, received)
	}
	return reps
}

// TestJobInline: four tasks on four nodes, each owning its lab host's
// device (inline mode) with 5% of the frames it receives dropped: the
// all-to-all over AM-II, GRIM and SSAM, every message handled exactly
// once; GRIM's registry found by all; and the failures: a task whose
// device is missing, a task that never opens, a task killed mid-run.
func TestJobInline(t *testing.T) {
	l := testLab(t)
	c := slurmtest.Start(t, slurmtest.WithNodes(nodes))
	loss := lossEnv + "=0.05"
	t.Run("amii", func(t *testing.T) {
		reps := runAllToAll(t, c, l, "amii", nodes, 200, loss)
		// A second job on the same nodes has a virtual network of its own.
		again := runAllToAll(t, c, l, "amii", nodes, 10)
		if again[0].Tag == reps[0].Tag || again[0].JobID == reps[0].JobID {
			t.Errorf("jobs %s and %s share tag %#x", reps[0].JobID, again[0].JobID, reps[0].Tag)
		}
	})
	t.Run("grim", func(t *testing.T) {
		for r, rep := range runAllToAll(t, c, l, "grim", nodes, 100, loss) {
			if !rep.Found || !rep.Answered {
				t.Errorf("rank %d: job.echo found %v, answered %v", r, rep.Found, rep.Answered)
			}
		}
	})
	t.Run("ssam", func(t *testing.T) { runAllToAll(t, c, l, "ssam", nodes, 100, loss) })
	t.Run("openfail", func(t *testing.T) {
		out, _, _, err := (step{mode: "openfail", env: []string{outEnv + "=" + t.TempDir()}, args: tasks(nodes)}).run(t, c, l)
		checkLines(t, out, err, nodes, "could not open its AM-II endpoint", "rank 2 (node n2)", "device nosuchdev0")
	})
	t.Run("fence", func(t *testing.T) {
		out, _, d, err := (step{mode: "fence", env: []string{fenceEnv + "=3s", outEnv + "=" + t.TempDir()}, args: tasks(nodes)}).run(t, c, l)
		checkLines(t, out, err, nodes-1, "exchanging cards: cluster: fence timed out after 3", "fence timeout: true")
		if d > time.Minute {
			t.Errorf("the step took %v", d)
		}
	})
	t.Run("kill", func(t *testing.T) { killedRank(t, c, l) })
}

// killedRank: the last rank kills itself (SIGKILL) in the middle of the
// all-to-all; the others' requests to it come back once the transport
// gives up (3 s), and each reports the rank gone and exits; srun ends.
func killedRank(t *testing.T, c *slurmtest.Cluster, l *lab.Lab) {
	dir := t.TempDir()
	out, stderr, d, err := (step{mode: "kill", env: []string{outEnv + "=" + dir, countEnv + "=100000"}, args: tasks(nodes)}).run(t, c, l)
	checkLines(t, out, err, nodes-1, "is gone: its messages came back", fmt.Sprintf("rank %d (node n%d)", nodes-1, nodes-1))
	if !strings.Contains(stderr, "Killed") {
		t.Errorf("srun does not report the rank killed")
	}
	if d > time.Minute {
		t.Errorf("the step took %v to end after the kill", d)
	}
}

// checkLines checks that a step failed and that its standard output has
// lines tasks, each with every one of want.
func checkLines(t *testing.T, out string, err error, lines int, want ...string) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Errorf("srun: %v, want the tasks' failure", err)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != lines {
		t.Errorf("%d lines, want %d:\n%s", len(got), lines, out)
	}
	for _, line := range got {
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("a rank said %q, want %q in it", line, w)
			}
		}
	}
}

// buildXam builds cmd/xam into dir and returns its path.
func buildXam(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "xam")
	start := time.Now()
	out, err := exec.Command("go", "build", "-o", bin, "github.com/xam-project/xam/cmd/xam").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/xam: %v\n%s", err, out)
	}
	t.Logf("built xam in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// startDaemons starts `xam fw` on every host of l, host i with id i and
// every other host as a peer, and waits until each answers; it returns
// the socket pattern (%d: the host id).
func startDaemons(t *testing.T, l *lab.Lab, bin string) string {
	t.Helper()
	pattern := filepath.Join(lab.StateDir(l.Name), "h%d.sock")
	for i, h := range l.Hosts {
		socket := fmt.Sprintf(pattern, i)
		// A generous give-up time: on a loaded machine of two cores, eight
		// tasks and four daemons can starve a peer past the default 3 s.
		args := []string{"fw", "--dev", h.Link, "--netns", h.NS, "--id", strconv.Itoa(i), "--socket", socket, "--window", "8", "--give-up", "30s"}
		for k, p := range l.Hosts {
			if k != i {
				args = append(args, "--host", fmt.Sprintf("%d=%s", k, p.MAC))
			}
		}
		d, err := lab.StartDaemon(l.Name, lab.DaemonSpec{Host: h.Name, Path: bin, Args: args, Socket: socket})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { logDaemon(t, h.Name, socket, d) })
		deadline := time.Now().Add(30 * time.Second)
		for !answers(socket) {
			if time.Now().After(deadline) || d.WaitExit(20*time.Millisecond) {
				t.Fatalf("the daemon of %s does not answer; its log ends:\n%s", h.Name, lab.LogTail(d.Log, 10))
			}
		}
	}
	return pattern
}

// logDaemon logs, when the test failed, what the daemon of host says of
// its peers and transport, and the end of its log.
func logDaemon(t *testing.T, host, socket string, d *lab.Daemon) {
	if !t.Failed() {
		return
	}
	var stats []byte
	if c, err := daemon.Dial(socket); err == nil {
		s, err := c.Stats()
		c.Close()
		if err == nil {
			stats, _ = json.Marshal(struct {
				Peers, Transport, Engine any
			}{s.Peers, s.Transport, s.Engine})
		}
	}
	t.Logf("the daemon of %s: %s\nits log ends:\n%s", host, stats, lab.LogTail(d.Log, 20))
}

// answers reports whether a daemon answers at socket.
func answers(socket string) bool {
	c, err := daemon.Dial(socket)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Stats()
	return err == nil
}

// TestJobFirmware: a firmware daemon (`xam fw`, a process of its own) per
// lab host, and two tasks per node through it: the all-to-all over AM-II,
// then over GRIM in two jobs in a row, on the same daemons, as a node's
// jobs follow each other on its daemon; and two jobs at once on the same
// nodes, whose virtual networks do not see each other, on daemons of
// their own. (The second GRIM job takes the ids the first used: its ranks'
// registry tables, bulk messages from the same endpoint names, were taken
// for the first job's and dropped when an engine numbered bulk messages
// per endpoint; TestEngineBulkAfterReuse pins that in nicfw. The tasks
// give GRIM a minute where its defaults give 10 s: on two loaded cores a
// rank's Publish once went unanswered that long, the rank gave up and
// closed its endpoint, and rank 0's table pushes to it came back
// ReasonClosed.)
func TestJobFirmware(t *testing.T) {
	l := testLab(t)
	bin := buildXam(t, t.TempDir())
	c := slurmtest.Start(t, slurmtest.WithNodes(nodes))
	var env []string
	fresh := func(t *testing.T) {
		t.Cleanup(func() { // after logDaemon's, which startDaemons registers
			if _, err := lab.StopDaemons(l.Name, 30*time.Second); err != nil {
				t.Errorf("stopping the daemons: %v", err)
			}
		})
		env = []string{modeEnv + "=firmware", socketEnv + "=" + startDaemons(t, l, bin)}
	}
	t.Run("shared", func(t *testing.T) {
		fresh(t)
		reps := runAllToAll(t, c, l, "amii", 2*nodes, 100, env...)
		for r := 0; r < 2*nodes; r += 2 {
			if reps[r].Table[r] == reps[r].Table[r+1] {
				t.Errorf("ranks %d and %d share endpoint %s", r, r+1, reps[r].Table[r])
			}
		}
		for run := range 2 {
			for r, rep := range runAllToAll(t, c, l, "grim", 2*nodes, 50, env...) {
				if !rep.Found || !rep.Answered {
					t.Errorf("GRIM job %d, rank %d: job.echo found %v, answered %v", run, r, rep.Found, rep.Answered)
				}
			}
		}
	})
	t.Run("twojobs", func(t *testing.T) {
		fresh(t)
		twoJobs(t, c, l, env)
	})
}

// twoJobs runs two jobs at once on the same nodes, eight tasks each
// through the nodes' daemons: each does its all-to-all, then sends from an
// endpoint of its virtual network to every endpoint of the other's, and
// every such request comes back refused (ReasonBadTag).
func twoJobs(t *testing.T, c *slurmtest.Cluster, l *lab.Lab, env []string) {
	shared := t.TempDir()
	type result struct {
		out, stderr string
		err         error
	}
	done := make(chan result, 2)
	for _, label := range []string{"A", "B"} {
		dir := filepath.Join(shared, label)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s := step{mode: "twojobs", env: append(slices.Clone(env), outEnv+"="+dir, labelEnv+"="+label, countEnv+"=50"), args: tasks(2 * nodes)}
		go func() {
			out, stderr, _, err := s.run(t, c, l)
			done <- result{out, stderr, err}
		}()
	}
	for range 2 {
		if r := <-done; r.err != nil {
			t.Errorf("srun: %v", r.err)
		}
	}
	if t.Failed() {
		return
	}
	a, b := readReports(t, filepath.Join(shared, "A"), 2*nodes), readReports(t, filepath.Join(shared, "B"), 2*nodes)
	if a[0].JobID == b[0].JobID || a[0].Tag == b[0].Tag {
		t.Errorf("jobs %s and %s, tags %#x and %#x: want two of each", a[0].JobID, b[0].JobID, a[0].Tag, b[0].Tag)
	}
	for _, reps := range [][]report{a, b} {
		for r, rep := range reps {
			want := 50 * (2*nodes - 1)
			if rep.Handled != want || rep.Dups != 0 || rep.Replies != want || len(rep.Returned) != 0 {
				t.Errorf("job %s rank %d: handled %d (duplicates %d), replies %d, returned %v; want %d",
					rep.JobID, r, rep.Handled, rep.Dups, rep.Replies, rep.Returned, want)
			}
			if len(rep.Cross) != 2*nodes {
				t.Errorf("job %s rank %d: %d of the other job's endpoints answered or returned, want %d", rep.JobID, r, len(rep.Cross), 2*nodes)
			}
			for _, reason := range rep.Cross {
				if reason != amii.ReasonBadTag.String() {
					t.Errorf("job %s rank %d: a request to the other job's endpoint came back %q, want %q", rep.JobID, r, reason, amii.ReasonBadTag)
				}
			}
		}
	}
}
