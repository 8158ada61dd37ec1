package main

import (
	"bufio"
	"bytes"
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
	"github.com/xam-project/xam/nicfw/daemon"
)

// labUp is what `xam lab up --fw --json` prints.
type labUp struct {
	Name  string `json:"name"`
	Hosts []struct {
		Name string `json:"name"`
		NS   string `json:"netns"`
		MAC  string `json:"mac"`
	} `json:"hosts"`
	Daemons []labDaemon `json:"daemons"`
}

// xamCommand returns xam (this test binary run as xam) with args, as a
// process of its own.
func xamCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
	return cmd
}

// labUpFw runs `xam lab up --fw --json` for lab name with more args, as a
// process of its own (its daemons are xam processes too), and returns its
// exit status, what it printed, and its records of the daemons. The lab
// goes, daemons and all, when the test ends.
func labUpFw(t *testing.T, name string, args ...string) (int, labUp, string, []lab.Daemon) {
	t.Helper()
	t.Cleanup(func() {
		if err := lab.Down(name); err != nil {
			t.Errorf("removing lab %s: %v", name, err)
		}
	})
	cmd := xamCommand(append([]string{"lab", "up", "--fw", "--json", "--name", name}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var up labUp
	if code == 0 {
		if err := json.Unmarshal(out.Bytes(), &up); err != nil {
			t.Fatalf("lab up --fw --json: %v\n%s", err, out.String())
		}
	}
	recs, err := lab.Daemons(name)
	if err != nil {
		t.Fatal(err)
	}
	return code, up, errb.String(), recs
}

// daemonStats returns the statistics of the daemon at socket.
func daemonStats(t *testing.T, socket string) daemon.Stats {
	t.Helper()
	c, err := daemon.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openEndpoints returns the endpoints open on the daemon at socket.
func openEndpoints(t *testing.T, socket string) int {
	t.Helper()
	return daemonStats(t, socket).Endpoints
}

// serveThrough runs the serving side of a ping as printed by `lab up
// --fw` (with more args) as a process of its own, until the test ends,
// once its endpoint is open on its daemon; it returns the process's
// standard error so far.
func serveThrough(t *testing.T, d labDaemon, args ...string) string {
	t.Helper()
	cmd := xamCommand(append(strings.Fields(d.Serve)[1:], args...)...)
	cmd.Stdout = os.Stderr
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	lines := waitLine(t, bufio.NewScanner(stderr), "serving AM-II pings")
	waitFor(t, "the serving endpoint", func() bool { return openEndpoints(t, d.Socket) == 1 })
	return lines
}

// checkGone checks that lab name is gone: its namespaces, its state dir,
// its daemons' processes and sockets.
func checkGone(t *testing.T, name string, recs []lab.Daemon) {
	t.Helper()
	if hasLab(name) {
		t.Errorf("lab %s still has namespaces", name)
	}
	if _, err := os.Stat(lab.StateDir(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lab's state dir %s: %v", lab.StateDir(name), err)
	}
	for _, d := range recs {
		if d.Running() {
			t.Errorf("the daemon of %s (pid %d) still runs", d.Host, d.PID)
		}
		if _, err := os.Stat(d.Socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the socket of %s: %v", d.Host, err)
		}
	}
}

// TestLabUpFw: `xam lab up --fw` builds a lab of two hosts with a daemon
// on each, and prints (here as JSON) their sockets and the commands that
// ping through them; those commands ping through both daemons; `lab
// list` shows them alive; `lab down` stops them and removes their sockets
// and the lab. Before, running daemons on a lab took a recipe: both
// daemons' sockets defaulted to one path, and each needed --netns, --id
// and every peer's MAC.
func TestLabUpFw(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("fw%d", os.Getpid())
	code, up, errs, recs := labUpFw(t, name, "--fw-args", "--sleep 50us")
	if code != 0 {
		t.Fatalf("lab up --fw: exit %d: %s", code, errs)
	}
	if len(up.Daemons) != 2 || len(recs) != 2 || len(up.Hosts) != 2 {
		t.Fatalf("lab up --fw: %+v, records %+v", up, recs)
	}
	for i, d := range up.Daemons {
		h := up.Hosts[i]
		want := filepath.Join(lab.StateDir(name), h.Name+".sock")
		if d.Host != h.Name || d.NS != h.NS || d.MAC != h.MAC || d.ID != i || d.Socket != want || d.PID != recs[i].PID || !recs[i].Alive {
			t.Errorf("daemon %d: %+v (host %+v), record %+v", i, d, h, recs[i])
		}
	}
	if want := fmt.Sprintf("xam ping --api amii --socket %s --peer-host 1", up.Daemons[0].Socket); up.Daemons[0].Ping != want {
		t.Errorf("h0's ping command %q, want %q", up.Daemons[0].Ping, want)
	}
	serveThrough(t, up.Daemons[1])
	args := append(strings.Fields(up.Daemons[0].Ping)[1:], "--count", "200", "--json")
	code, out, errs := xam(t, nil, args...)
	var r bench.AMIIResult
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 200 || r.Lost != 0 {
		t.Fatalf("%s: exit %d: %s %s", up.Daemons[0].Ping, code, out, errs)
	}

	code, out, errs = xam(t, nil, "lab", "list", "--json")
	var infos []lab.Info
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("lab list --json: exit %d: %s %s", code, out, errs)
	}
	listed := 0
	for _, i := range infos {
		if i.Name != name {
			continue
		}
		for j, d := range i.Daemons {
			if d.Alive && d.PID == recs[j].PID && d.Socket == up.Daemons[j].Socket {
				listed++
			}
		}
	}
	if listed != 2 {
		t.Errorf("lab list --json shows %d of the 2 daemons alive: %s", listed, out)
	}
	if _, out, _ := xam(t, nil, "lab", "list"); !strings.Contains(out, fmt.Sprintf("h1 daemon pid %d alive, socket %s", recs[1].PID, up.Daemons[1].Socket)) {
		t.Errorf("lab list:\n%s", out)
	}

	code, out, errs = xam(t, nil, "lab", "down", "--name", name)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("stopped the daemon of h0 (pid %d)", recs[0].PID)) ||
		!strings.Contains(out, fmt.Sprintf("stopped the daemon of h1 (pid %d)", recs[1].PID)) || !strings.Contains(out, "removed lab "+name) {
		t.Errorf("lab down: exit %d: %s %s", code, out, errs)
	}
	checkGone(t, name, recs)
}

// TestLabUpFwSwitched: on a lab of three hosts joined by a switch, each
// daemon knows both its peers, by the ids and MACs of the lab's hosts. A
// daemon that dies (killed here) shows as dead in `lab list`, and `lab
// down` says so, with the end of its log, and still removes everything.
func TestLabUpFwSwitched(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("fwsw%d", os.Getpid())
	code, up, errs, recs := labUpFw(t, name, "--hosts", "3", "--fw-args", "--sleep 50us -v")
	if code != 0 || len(up.Daemons) != 3 {
		t.Fatalf("lab up --fw --hosts 3: exit %d: %+v %s", code, up, errs)
	}
	for i, d := range up.Daemons {
		s := daemonStats(t, d.Socket)
		if len(s.Hosts) != 3 {
			t.Errorf("the daemon of h%d knows hosts %+v, want all 3", i, s.Hosts)
		}
		for _, h := range s.Hosts {
			if int(h.ID) >= 3 || h.MAC != up.Hosts[h.ID].MAC {
				t.Errorf("the daemon of h%d knows host %d as %s; the lab's hosts: %+v", i, h.ID, h.MAC, up.Hosts)
			}
		}
	}
	p, err := os.FindProcess(recs[2].PID)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if !recs[2].WaitExit(time.Minute) {
		t.Fatal("the killed daemon has not exited after a minute")
	}
	if _, out, _ := xam(t, nil, "lab", "list"); !strings.Contains(out, fmt.Sprintf("h2 daemon pid %d dead", recs[2].PID)) ||
		!strings.Contains(out, fmt.Sprintf("h0 daemon pid %d alive", recs[0].PID)) {
		t.Errorf("lab list with a dead daemon:\n%s", out)
	}
	code, out, errs := xam(t, nil, "lab", "down", "--name", name)
	if code != 0 || !strings.Contains(errs, fmt.Sprintf("the daemon of h2 (pid %d) had exited before lab down; its log ended:", recs[2].PID)) ||
		!strings.Contains(errs, "xam fw: host 2 on eth0") || !strings.Contains(out, "stopped the daemon of h1") {
		t.Errorf("lab down with a dead daemon: exit %d: %s %s", code, out, errs)
	}
	checkGone(t, name, recs)
}

// TestLabUpFwFails: a daemon that fails to start (here: told to run on a
// CPU the machine does not have) fails `lab up --fw` with the end of its
// log, and the lab goes with every daemon.
func TestLabUpFwFails(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("fwbad%d", os.Getpid())
	code, _, errs, _ := labUpFw(t, name, "--fw-args", "--cores 1023")
	if code != 1 || !strings.Contains(errs, "exited while starting; its log ends:") || !strings.Contains(errs, "CPU 1023") {
		t.Errorf("lab up --fw with a daemon that fails: exit %d: %s", code, errs)
	}
	checkGone(t, name, nil)
	if left, _ := lab.Daemons(name); len(left) != 0 {
		t.Errorf("daemons recorded after a failed lab up: %+v", left)
	}
}

// TestLabUpFwUsage: --fw-args is checked as `xam fw` would check it, before
// anything is built, and may not set what the lab sets for each daemon.
func TestLabUpFwUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fw-args", "-v"}, "--fw-args needs --fw"},
		{[]string{"--fw", "--fw-args", "--dev eth1"}, "--fw-args: --dev is the lab's to set"},
		{[]string{"--fw", "--fw-args", "--host 3=02:00:00:00:00:03"}, "--fw-args: --host is the lab's to set"},
		{[]string{"--fw", "--fw-args", "--map"}, "--fw-args: --map is the lab's to set"},
		{[]string{"--fw", "--fw-args", "--job"}, "--fw-args: --job is the lab's to set"},
		{[]string{"--fw", "--fw-args", "--bogus"}, "--fw-args: flag provided but not defined: -bogus"},
		{[]string{"--fw", "--fw-args", "--sleep -1s"}, "--fw-args: --sleep -1s"},
		{[]string{"--fw", "--fw-args", "--module nosuch"}, `--fw-args: --module "nosuch": unknown module`},
		{[]string{"--fw", "--fw-args", "-v -h"}, "see `xam fw -h`"},
	} {
		args := append([]string{"lab", "up", "--name", "never"}, tc.args...)
		if code, _, errs := xam(t, nil, args...); code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("xam %q: exit %d, %q; want 2 and %q", args, code, errs, tc.want)
		}
	}
	if hasLab("never") {
		t.Error("a lab was built")
	}
}
