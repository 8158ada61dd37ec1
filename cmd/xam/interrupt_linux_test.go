package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// TestMain runs the command itself when the test binary is started as xam
// (XAM_TEST_AS_XAM=1), so that tests can signal and kill a real xam
// process; otherwise the tests.
func TestMain(m *testing.M) {
	if os.Getenv("XAM_TEST_AS_XAM") == "1" {
		main()
	}
	// What the tests start of this program (os.Executable: the daemons
	// of `ping --mode firmware`, `bench engine` and `lab up --fw`) runs as
	// xam too.
	os.Setenv("XAM_TEST_AS_XAM", "1")
	os.Exit(m.Run())
}

// xamProcess starts xam with args as a process of its own and returns it,
// with its standard output collected and a reader of its standard error.
func xamProcess(t *testing.T, args ...string) (*exec.Cmd, *strings.Builder, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
	var out strings.Builder
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		lab.Down(fmt.Sprintf("ping%d", cmd.Process.Pid))
	})
	return cmd, &out, bufio.NewScanner(stderr)
}

// interrupt sends cmd sig, reads the rest of its standard error, and
// checks that it exits with the status of an interrupted run.
func interrupt(t *testing.T, cmd *exec.Cmd, sig syscall.Signal, out *strings.Builder, stderr *bufio.Scanner) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	go func() {
		for stderr.Scan() {
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit: %v, want status %d; stdout %s", err, exitInterrupted, out)
	}
}

// waitLine reads lines from sc until one contains want, and returns the
// lines read.
func waitLine(t *testing.T, sc *bufio.Scanner, want string) string {
	t.Helper()
	var seen strings.Builder
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), want) {
			return seen.String()
		}
	}
	t.Fatalf("no line with %q; stderr was:\n%s", want, seen.String())
	return ""
}

// TestPingInterrupted: a ping interrupted by SIGINT or SIGTERM in the
// middle of its run prints what it measured (as text, or as JSON marked
// interrupted), removes the lab it built, and exits 130. Before, it left
// its namespaces behind and printed nothing.
func TestPingInterrupted(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		json bool
	}{{syscall.SIGINT, false}, {syscall.SIGTERM, true}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			// No warm-up: once a progress line is out, round trips were
			// measured.
			args := []string{"ping", "--api", "raw", "--count", "100000000", "--warmup", "0"}
			if tc.json {
				// No progress lines under --json: wait for the lab instead.
				args = append(args, "--json")
			}
			cmd, out, stderr := xamProcess(t, args...)
			name := fmt.Sprintf("ping%d", cmd.Process.Pid)
			if tc.json {
				waitFor(t, "the ping's lab", func() bool { return hasLab(name) })
			} else {
				waitLine(t, stderr, "round trips")
			}
			interrupt(t, cmd, tc.sig, out, stderr)
			if hasLab(name) {
				t.Errorf("the interrupted ping left lab %s behind", name)
			}
			if tc.json {
				var r bench.PingResult
				if err := json.Unmarshal([]byte(out.String()), &r); err != nil || !r.Interrupted || r.Count != 100000000 || r.Done >= r.Count {
					t.Errorf("JSON %q: %+v, %v", out, r, err)
				}
			} else if !strings.Contains(out.String(), "(interrupted)") || !strings.Contains(out.String(), "RTT  p50") {
				t.Errorf("stdout %q: want the round trips measured, marked interrupted", out)
			}
		})
	}
}

// TestLabDownStale: `xam lab down --stale` removes the lab of a xam process
// that was killed (nothing could clean up), and leaves the labs live
// processes own (this test's) and persistent ones (`lab up`).
func TestLabDownStale(t *testing.T) {
	testenv.RequirePrivileged(t)
	live, err := lab.Up(lab.Config{Name: fmt.Sprintf("live%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Down() })
	persistent := fmt.Sprintf("keep%d", os.Getpid())
	if code, _, errs := xam(t, nil, "lab", "up", "--name", persistent); code != 0 {
		t.Fatalf("lab up: %s", errs)
	}
	t.Cleanup(func() { lab.Down(persistent) })

	cmd, _, stderr := xamProcess(t, "ping", "--api", "raw", "--count", "100000000")
	waitLine(t, stderr, "round trips")
	killed := fmt.Sprintf("ping%d", cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !hasLab(killed) {
		t.Fatalf("the killed ping's lab %s is not there to clean up", killed)
	}
	code, out, errs := xam(t, nil, "lab", "list", "--json")
	var infos []lab.Info
	if err := json.Unmarshal([]byte(out), &infos); code != 0 || err != nil {
		t.Fatalf("lab list --json: exit %d, %v: %s %s", code, err, out, errs)
	}
	states := map[string]lab.State{}
	for _, i := range infos {
		states[i.Name] = i.State
	}
	if states[killed] != lab.Stale || states[live.Name] != lab.Owned || states[persistent] != lab.Persistent {
		t.Errorf("lab list: %v", states)
	}
	if code, out, errs := xam(t, nil, "lab", "down", "--stale"); code != 0 || !strings.Contains(out, "removed lab "+killed) {
		t.Fatalf("lab down --stale: exit %d, %s %s", code, out, errs)
	}
	if hasLab(killed) || !hasLab(live.Name) || !hasLab(persistent) {
		t.Errorf("after lab down --stale: killed %v, live %v, persistent %v", hasLab(killed), hasLab(live.Name), hasLab(persistent))
	}
}

// TestPingAllLost: a ping whose every round trip is lost (no peer serves)
// reports the loss and exits 1, never 0 with an RTT of 0s; its JSON says
// so too.
func TestPingAllLost(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("lost%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	a, b := l.Hosts[0], l.Hosts[1]
	for _, asJSON := range []bool{false, true} {
		args := []string{"ping", "--dev", "eth0", "--peer", b.MAC.String(), "--count", "3", "--warmup", "0", "--timeout", "20ms"}
		if asJSON {
			args = append(args, "--json")
		}
		var code int
		var out, errs string
		a.Do(func() error { code, out, errs = xam(t, nil, args...); return nil })
		if code != 1 || !strings.Contains(errs, "all 3 round trips were lost") {
			t.Errorf("%v: exit %d, %s %s", args, code, out, errs)
		}
		if asJSON {
			var r bench.PingResult
			if err := json.Unmarshal([]byte(out), &r); err != nil || r.Done != 3 || r.Lost != 3 || r.Loss != 1 || r.Warmup != 0 || r.Config.Peer != b.MAC.String() {
				t.Errorf("JSON %s: %+v, %v", out, r, err)
			}
		} else if !strings.Contains(out, "3 lost (100.00%)") || !strings.Contains(out, "no round trip was answered") {
			t.Errorf("text: %s", out)
		}
	}
}

func hasLab(name string) bool {
	names, _ := lab.Namespaces(lab.Prefix + name + "-")
	return len(names) > 0
}

// waitFor polls cond every few milliseconds for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBadValues: every value out of range gets one line naming the flag
// and what it accepts, and exit 2. Before, most were taken silently
// (--size 0 became 32, --hosts 0 became 2, --timeout -1s was accepted).
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ping", "--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{[]string{"ping", "--size", "0"}, "--size 0: want 1..65535"},
		{[]string{"ping", "--warmup", "-5"}, "--warmup -5: want 0 or more"},
		{[]string{"ping", "--count", "0"}, "--count 0: want at least 1"},
		{[]string{"ping", "--loss", "0.1", "--api", "raw"}, "--loss works with --api ssam, amii or grim only"},
		{[]string{"ping", "--loss", "1", "--api", "ssam"}, "--loss 1: want a fraction in [0, 1)"},
		{[]string{"ping", "--dup", "0.1", "--api", "udp"}, "--dup works with --api ssam, amii or grim only"},
		{[]string{"ping", "--api", "amii", "--size", "8193"}, "--size 8193: an AM-II ping is a short message (up to 64 bytes) or a medium one (up to 8192 bytes)"},
		{[]string{"ping", "--dup", "-0.5", "--api", "amii"}, "--dup -0.5: want a fraction in [0, 1)"},
		{[]string{"ping", "--mode", "firmware"}, "--mode firmware works with --api amii or grim only"},
		{[]string{"ping", "--api", "amii", "--fw-cores", "2/3"}, "--fw-cores works with --mode firmware"},
		{[]string{"ping", "--api", "amii", "--mode", "firmware", "--fw-cores", "2"}, "--fw-cores \"2\": want 2 CPU list(s) separated by '/' for --fw-layout daemons, e.g. 2/3"},
		{[]string{"ping", "--api", "amii", "--mode", "firmware", "--fw-layout", "group", "--fw-cores", "2/3"}, "want 1 CPU list(s)"},
		{[]string{"ping", "--api", "amii", "--mode", "firmware", "--fw-cores", "2/x"}, `--fw-cores: "x": want CPU numbers`},
		{[]string{"ping", "--api", "amii", "--mode", "firmware", "--fw-cores", "2/"}, "an empty CPU list"},
		{[]string{"lab", "up", "--hosts", "0"}, "--hosts 0: want 2..250"},
		{[]string{"lab", "up", "--port-buffer", "64k"}, "--port-buffer needs --port-rate"},
		{[]string{"lab", "up", "--queues", "0"}, "--queues 0: want 1..64"},
		{[]string{"fw", "--dev", "eth0", "--map", "--id", "1"}, "--map assigns this host's id: no --id"},
		{[]string{"fw", "--dev", "eth0", "--id", "1", "--host", "2=02:00:00:00:00:02", "--cores", "abc"}, `--cores: "abc": want CPU numbers`},
		{[]string{"fw", "--dev", "eth0", "--id", "1", "--host", "2=02:00:00:00:00:02", "--window", "0"}, "--window 0: want at least 1"},
		{[]string{"bench", "engine", "--out", "d"}, "--out: engine and hostile draw no plots"},
		{[]string{"capture", "--dev", "p0", "--out", "x", "--buffer", "10"}, "--buffer 10: want"},
		{[]string{"demo", "--count", "0"}, "--count 0: want at least 1"},
	} {
		code, out, errs := xam(t, nil, tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("xam %v: exit %d, stdout %q, stderr %q; want 2 and one line with %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// TestUnprivileged: commands that need root say so in one line, naming
// the missing capabilities, when run as uid 65534. Before, `fw` blamed
// MEMLOCK and `ping` printed lines that never said "root".
func TestUnprivileged(t *testing.T) {
	testenv.RequirePrivileged(t)
	bin := reachableCopy(t, "xam.test")
	dir := filepath.Dir(bin)
	for _, args := range [][]string{
		{"ping"},
		{"lab", "up", "--name", "nobody"},
		{"fw", "--dev", "lo", "--id", "1", "--host", "2=02:00:00:00:00:02"},
		{"demo"},
		{"bench", "ssam"},
		{"stat", "--dev", "lo"},
		{"capture", "--dev", "lo", "--out", filepath.Join(dir, "c.pcap")},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Count(string(out), "\n") != 1 ||
			!strings.Contains(string(out), "needs root (missing CAP_NET_ADMIN") {
			t.Errorf("xam %v as nobody: %v: %q", args, err, out)
		}
	}
}

// TestBenchInterrupted: `xam bench ssam` interrupted in its first
// measurement prints the tables with what was measured (marked
// interrupted), removes its lab and exits 130. Before, the signal removed
// the lab and exited, printing nothing measured.
func TestBenchInterrupted(t *testing.T) {
	testenv.RequirePrivileged(t)
	cmd, out, stderr := xamProcess(t, "bench", "ssam", "--count", "3000", "--bulk", "1000000")
	waitLine(t, stderr, "measuring trap costs")
	interrupt(t, cmd, syscall.SIGINT, out, stderr)
	if !strings.Contains(out.String(), "**Interrupted**") || !strings.Contains(out.String(), "## 1. Trap costs over AF_XDP") {
		t.Errorf("stdout %q: want the tables, marked interrupted", out)
	}
	if hasLab(fmt.Sprintf("bench%d", cmd.Process.Pid)) {
		t.Error("the interrupted bench left its lab behind")
	}
}

// TestBenchAllInterrupted: `xam bench all` interrupted in its second
// experiment writes the report of what was measured (the first
// experiment ok, the second interrupted, the rest not run), removes its
// lab and exits 130.
func TestBenchAllInterrupted(t *testing.T) {
	testenv.RequirePrivileged(t)
	dir := t.TempDir()
	cmd, out, stderr := xamProcess(t, "bench", "all", "--quick", "--out", dir)
	waitLine(t, stderr, "2/7 logp, run 1/3: ")
	interrupt(t, cmd, syscall.SIGINT, out, stderr)
	r, status := readReport(t, dir)
	if !r.Interrupted || status["ssam"] != "ok" || status["logp"] != "interrupted" || status["grim"] != "not run" {
		t.Errorf("interrupted %v, statuses %v", r.Interrupted, status)
	}
	if md, err := os.ReadFile(filepath.Join(dir, "report.md")); err != nil || !strings.Contains(string(md), "**Interrupted**") {
		t.Errorf("report.md: %v, want it marked interrupted", err)
	}
	if hasLab(fmt.Sprintf("bench%d", cmd.Process.Pid)) {
		t.Error("the interrupted run left its lab behind")
	}
}

// reachableCopy copies this test binary (which runs as xam with
// XAM_TEST_AS_XAM=1) as name into a temporary directory that every user
// may reach, for a test that runs it as another user, and returns its path.
func reachableCopy(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, name)
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
