package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/slurmtest"
	"github.com/xam-project/xam/internal/syncbuf"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/nicfw/daemon"
)

// jobLab brings up a lab of n hosts on a switch and a private Slurm
// cluster of n nodes, both taken down when t ends, and returns them with
// the prefix that, followed by a node's index ($SLURM_NODEID), names its
// host's namespace.
func jobLab(t *testing.T, name string, n int) (*lab.Lab, *slurmtest.Cluster, string) {
	t.Helper()
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: name, Hosts: n, Switch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	c := slurmtest.Start(t, slurmtest.WithNodes(n))
	return l, c, strings.TrimSuffix(l.Hosts[0].NS, "0")
}

// startJobDaemons starts cmd (the daemons: a step, or processes) and
// returns a channel closed when it has exited, and its output so far.
func startJobDaemons(t *testing.T, cmd *exec.Cmd) (<-chan struct{}, *syncbuf.Buffer, *error) {
	t.Helper()
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	return exited, out, &err
}

// awaitDaemon waits until the daemon at socket answers, and returns its
// stats. It fails the test when exited closes first (the daemons ended),
// or after daemonStartBound.
func awaitDaemon(t *testing.T, socket string, exited <-chan struct{}, out fmt.Stringer) daemon.Stats {
	t.Helper()
	deadline := time.Now().Add(daemonStartBound)
	for {
		if c, err := daemon.Dial(socket); err == nil {
			s, err := c.Stats()
			c.Close()
			if err == nil {
				return s
			}
		}
		select {
		case <-exited:
			t.Fatalf("the daemons ended before %s answered:\n%s", socket, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within %v:\n%s", socket, daemonStartBound, out)
		}
	}
}

// checkJobHosts checks that a daemon's host table names every host of
// the lab by its index and MAC.
func checkJobHosts(t *testing.T, who string, s daemon.Stats, l *lab.Lab) {
	t.Helper()
	if len(s.Hosts) != len(l.Hosts) {
		t.Errorf("%s knows hosts %+v, want all %d of the lab", who, s.Hosts, len(l.Hosts))
	}
	for _, h := range s.Hosts {
		if int(h.ID) >= len(l.Hosts) || h.MAC != l.Hosts[h.ID].MAC.String() {
			t.Errorf("%s knows host %d as %s; the lab's hosts are h0..h%d", who, h.ID, h.MAC, len(l.Hosts)-1)
		}
	}
}

// pingJob pings host peer through the daemon at socket, whose peer serves
// (serveThrough), and checks every round trip is answered.
func pingJob(t *testing.T, socket, peerSocket string, self, peer int) {
	t.Helper()
	serveThrough(t, labDaemon{Socket: peerSocket, Serve: fmt.Sprintf("xam ping --api amii --socket %s --peer-host %d --serve", peerSocket, self)})
	code, out, errs := xam(t, nil, "ping", "--api", "amii", "--socket", socket, "--peer-host", strconv.Itoa(peer), "--count", "200", "--json")
	var r bench.AMIIResult
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 200 || r.Lost != 0 {
		t.Fatalf("ping from host %d to host %d: exit %d: %s %s", self, peer, code, out, errs)
	}
	t.Logf("host %d to host %d through the job's daemons: 200 round trips, p50 %v", self, peer, time.Duration(r.RTT.P50))
}

// checkNoXDP checks that no XDP program is left on the lab's hosts.
func checkNoXDP(t *testing.T, l *lab.Lab) {
	t.Helper()
	for _, h := range l.Hosts {
		link, err := h.Netlink.LinkByName(h.Link)
		if err != nil {
			t.Fatal(err)
		}
		if x := link.Attrs().Xdp; x != nil && (x.Attached || x.ProgId != 0) {
			t.Errorf("%s of %s still has XDP program %d attached", h.Link, h.Name, x.ProgId)
		}
	}
}

// processServing returns the pid of the `xam fw` process whose command
// line names socket.
func processServing(t *testing.T, socket string) int {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "fw" && strings.Contains(string(b), "\x00"+socket+"\x00") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	t.Fatalf("no xam fw process serves %s", socket)
	return 0
}

// TestFwJob: `xam fw --job` as a step of a real Slurm job, one daemon per
// node: four virtual nodes stand for four hosts of a switched lab, each
// task entering its host's namespace (the PMI-2 descriptor survives the
// exec). The daemons learn each other through PMI-2: every one's host
// table names the four hosts by their index in the job and their MACs.
// AM-II pings go through two of them; a daemon that is killed makes its
// peers return what is sent to it, and they serve on. SIGTERM from Slurm
// (scancel) stops the rest cleanly: sockets removed, no XDP program left.
func TestFwJob(t *testing.T) {
	const n = 4
	name := fmt.Sprintf("fwjob%d", os.Getpid())
	l, c, nsPrefix := jobLab(t, name, n)
	dir := t.TempDir()
	script := fmt.Sprintf("exec ip netns exec %s$SLURM_NODEID %s fw --job --dev %s --socket %s/h$SLURM_NODEID.sock --sleep 50us -v",
		nsPrefix, os.Args[0], l.Hosts[0].Link, dir)
	step := c.Srun(t, "-N", strconv.Itoa(n), "--ntasks-per-node=1", "--mpi=pmi2", "--job-name", name, "sh", "-c", script)
	step.Env = append(step.Env, "XAM_TEST_AS_XAM=1")
	start := time.Now()
	exited, out, stepErr := startJobDaemons(t, step)
	socket := func(i int) string { return fmt.Sprintf("%s/h%d.sock", dir, i) }
	for i := range n {
		checkJobHosts(t, fmt.Sprintf("the daemon of node n%d", i), awaitDaemon(t, socket(i), exited, out), l)
	}
	t.Logf("%d daemons up in %v", n, time.Since(start).Round(time.Millisecond))
	pingJob(t, socket(0), socket(1), 0, 1)

	// A daemon lost: what host 0 sends to it comes back to the sender
	// when the transport gives up; host 0's daemon serves on.
	pid := processServing(t, socket(3))
	syscall.Kill(pid, syscall.SIGKILL)
	code, pout, errs := xam(t, nil, "ping", "--api", "amii", "--socket", socket(0), "--peer-host", "3", "--count", "2", "--warmup", "0", "--json")
	var r bench.AMIIResult
	if code != 1 || json.Unmarshal([]byte(pout), &r) != nil || r.Lost != 2 || r.Returned["host unreachable"] != 2 {
		t.Errorf("ping to the killed daemon's host: exit %d: %s %s; want both returned, host unreachable", code, pout, errs)
	}
	pingJob(t, socket(0), socket(2), 0, 2)

	// scancel --signal=TERM: what Slurm sends a step's tasks first when
	// the job is cancelled or ends.
	stop := time.Now()
	if b, err := c.Command("scancel", "--signal=TERM", "--name", name).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v: %s", err, b)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the daemons' step still runs a minute after SIGTERM:\n%s", out)
	}
	t.Logf("the step ended %v after scancel: %v\n%s", time.Since(stop).Round(time.Millisecond), *stepErr, out)
	for i := range n - 1 {
		if _, err := os.Stat(socket(i)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the socket of node n%d: %v, want it removed", i, err)
		}
	}
	for _, want := range []string{"slurm job ", "rank 0 of 4 on node n0; peers 1=" + l.Hosts[1].MAC.String(), "task 3: Killed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the step's output lacks %q", want)
		}
	}
	if strings.Count(out.String(), "xam fw: host ") != n {
		t.Errorf("want %d daemons announced", n)
	}
	checkNoXDP(t, l)
	checkJobFails(t, c, nsPrefix, dir)
	checkNoXDP(t, l)
}

// checkJobFails: a daemon of a job that cannot open its device (node n1's
// here) ends the daemons' step at once, saying why, rather than leave the
// others waiting for its card until the fence's timeout (2 minutes).
func checkJobFails(t *testing.T, c *slurmtest.Cluster, nsPrefix, dir string) {
	t.Helper()
	script := fmt.Sprintf(`dev=eth0; [ "$SLURM_NODEID" = 1 ] && dev=nosuch0; exec ip netns exec %s$SLURM_NODEID %s fw --job --dev $dev --socket %s/bad$SLURM_NODEID.sock`,
		nsPrefix, os.Args[0], dir)
	cmd := c.Srun(t, "-N", "2", "--ntasks-per-node=1", "--mpi=pmi2", "sh", "-c", script)
	cmd.Env = append(cmd.Env, "XAM_TEST_AS_XAM=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("a step with a missing device: %v after %v:\n%s", err, took.Round(time.Millisecond), out)
	if err == nil {
		t.Error("the step succeeded")
	}
	// Slurm picks the step's two nodes from the four (n2 and n3 when
	// the daemons' step still holds the others): rank 1 is the second,
	// whatever its name.
	if want := regexp.MustCompile(`xam: rank 1 aborts the job: xam fw on n[0-9]+: device nosuch0: `); !want.Match(out) {
		t.Errorf("the step's output lacks %q", want)
	}
	if took > time.Minute {
		t.Errorf("the step took %v to end", took)
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestFwHostfile: `xam fw --hostfile FILE --rank N` on two lab hosts,
// without Slurm: the daemons meet at rank 0's rendezvous, take their
// devices from the file and their host table from each other, a ping goes
// through them, and SIGTERM stops them cleanly. A hostfile whose MAC is
// not the device's makes that daemon end the job, the other one with it.
func TestFwHostfile(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("fwhf%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	dir := t.TempDir()
	hostfile := func(name string, mac1 string) string {
		path := filepath.Join(dir, name)
		text := fmt.Sprintf("rendezvous 127.0.0.1:%d\n0 h0 %s %s\n1 h1 %s %s\n", freePort(t),
			l.Hosts[0].Link, l.Hosts[0].MAC, l.Hosts[1].Link, mac1)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	socket := func(i int) string { return fmt.Sprintf("%s/h%d.sock", dir, i) }
	start := func(file string) (ends []<-chan struct{}, outs []*syncbuf.Buffer, errs []*error, cmds []*exec.Cmd) {
		for i, h := range l.Hosts {
			cmd := xamCommand("fw", "--hostfile", file, "--rank", strconv.Itoa(i), "--netns", h.NS, "--socket", socket(i), "--sleep", "50us")
			exited, out, err := startJobDaemons(t, cmd)
			ends, outs, errs, cmds = append(ends, exited), append(outs, out), append(errs, err), append(cmds, cmd)
		}
		return ends, outs, errs, cmds
	}

	ends, outs, errs, cmds := start(hostfile("good", l.Hosts[1].MAC.String()))
	for i := range l.Hosts {
		checkJobHosts(t, fmt.Sprintf("rank %d's daemon", i), awaitDaemon(t, socket(i), ends[i], outs[i]), l)
	}
	pingJob(t, socket(0), socket(1), 0, 1)
	for i, cmd := range cmds {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-ends[i]:
		case <-time.After(time.Minute):
			t.Fatalf("rank %d's daemon runs on a minute after SIGTERM", i)
		}
		if *errs[i] != nil {
			t.Errorf("rank %d's daemon: %v after SIGTERM, want exit 0:\n%s", i, *errs[i], outs[i])
		}
		if _, err := os.Stat(socket(i)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("rank %d's socket: %v, want it removed", i, err)
		}
	}
	checkNoXDP(t, l)

	ends, outs, errs, _ = start(hostfile("badmac", "02:00:00:00:00:99"))
	for i := range l.Hosts {
		select {
		case <-ends[i]:
		case <-time.After(time.Minute):
			t.Fatalf("rank %d's daemon runs on a minute after a bad MAC", i)
		}
		if *errs[i] == nil {
			t.Errorf("rank %d's daemon exited 0 with a bad MAC in the hostfile", i)
		}
	}
	t.Logf("with a bad MAC, rank 0 said:\n%s\nrank 1 said:\n%s", outs[0], outs[1])
	if want := "but " + filepath.Join(dir, "badmac") + " gives rank 1 MAC 02:00:00:00:00:99"; !strings.Contains(outs[1].String(), want) {
		t.Errorf("rank 1 said %q, want %q", outs[1], want)
	}
	if !strings.Contains(outs[0].String(), "the job was aborted") {
		t.Errorf("rank 0 said %q, want the job aborted", outs[0])
	}
	checkNoXDP(t, l)
}

// TestFwJobSbatch: examples/slurm/fw-and-app.sbatch as written, under
// sbatch on two virtual nodes standing for the two hosts of a lab. The
// script's `xam` is this test binary behind a wrapper that enters the
// node's lab host and gives it a /run/xam of its own (a mount namespace),
// so that each node's daemon serves at the job's default socket,
// /run/xam/job-JOBID.sock, and the application's steps find it there by
// the job id alone. The job's ping goes through both daemons; its end
// stops them: sockets gone, no XDP program left.
func TestFwJobSbatch(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireCommand(t, "sbatch")
	testenv.RequireCommand(t, "unshare")
	script, err := filepath.Abs("../../examples/slurm/fw-and-app.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("fwsb%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	c := slurmtest.Start(t, slurmtest.WithNodes(2))
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	for i := range l.Hosts {
		if err := os.MkdirAll(filepath.Join(runDir, fmt.Sprintf("h%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll("/run/xam", 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf(`#!/bin/sh
# xam on virtual node nK (SLURMD_NODENAME; SLURM_NODEID counts the step's
# nodes): in lab host hK's namespace, with a /run/xam of its own
k=${SLURMD_NODENAME#n}
exec unshare --mount --propagation private sh -c 'k=$1; shift; mount --bind "$0/h$k" /run/xam && exec ip netns exec %s"$k" %s "$@"' %s "$k" "$@"
`, strings.TrimSuffix(l.Hosts[0].NS, "0"), os.Args[0], runDir)
	if err := os.WriteFile(filepath.Join(dir, "xam"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	outFile := filepath.Join(dir, "job.out")
	cmd := c.Command("sbatch", "--wait", "--output", outFile, script)
	cmd.Env = append(cmd.Env, "PATH="+dir+":"+os.Getenv("PATH"), "XAM_DEV="+l.Hosts[0].Link, "XAM_TEST_AS_XAM=1")
	start := time.Now()
	b, err := cmd.CombinedOutput()
	out, _ := os.ReadFile(outFile)
	t.Logf("sbatch --wait: %v in %v: %s\nthe job's output:\n%s", err, time.Since(start).Round(time.Millisecond), b, out)
	if err != nil {
		t.Fatalf("the job failed")
	}
	if !strings.Contains(string(out), "ping-pong: 1000 round trips") || !strings.Contains(string(out), ", 0 lost") {
		t.Errorf("the job's output lacks 1000 round trips, none lost")
	}
	for i := range l.Hosts {
		left, _ := filepath.Glob(filepath.Join(runDir, fmt.Sprintf("h%d", i), "*"))
		if len(left) > 0 {
			t.Errorf("node n%d's /run/xam holds %v after the job, want nothing", i, left)
		}
	}
	checkNoXDP(t, l)
}
