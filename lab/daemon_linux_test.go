package lab

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stateIn points the labs' state at a directory of the test's.
func stateIn(t *testing.T) {
	old := OwnerDir
	OwnerDir = t.TempDir()
	t.Cleanup(func() { OwnerDir = old })
}

// startSh starts `sh -c script` as the daemon of host.
func startSh(t *testing.T, name, host, script string) *Daemon {
	t.Helper()
	d, err := StartDaemon(name, DaemonSpec{Host: host, Path: "/bin/sh", Args: []string{"-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.Running() {
			if p, err := os.FindProcess(d.PID); err == nil {
				p.Kill()
			}
		}
	})
	return d
}

// waitFor polls cond until it holds, with a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for bound := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(bound) {
			t.Fatalf("%s: not after a minute", what)
		}
	}
}

// TestDaemons: a lab's daemons are started detached and recorded, listed
// with whether they run, and stopped: one that exits on SIGTERM, one that
// ignores it (killed after the grace) and one that had exited by itself
// (reported with the end of its log). The state dir goes with them.
func TestDaemons(t *testing.T) {
	stateIn(t)
	const name = "dtest"
	polite := startSh(t, name, "h0", "echo serving; exec sleep 1000")
	stubborn := startSh(t, name, "h1", `trap "" TERM; exec sleep 1000`)
	early := startSh(t, name, "h2", "echo cannot open the device; exit 3")
	if !early.WaitExit(time.Minute) {
		t.Fatal("the failing daemon has not exited after a minute")
	}
	// The stubborn one ignores SIGTERM once it runs sleep.
	waitFor(t, "the stubborn daemon runs sleep", func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(stubborn.PID) + "/comm")
		return strings.TrimSpace(string(b)) == "sleep"
	})
	if _, err := StartDaemon(name, DaemonSpec{Host: "h0", Path: "/bin/true"}); err == nil || !strings.Contains(err.Error(), "already runs a daemon") {
		t.Errorf("a second daemon on h0: %v", err)
	}
	for _, bad := range []string{"sw", "x", "h0/../h1"} {
		if _, err := StartDaemon(name, DaemonSpec{Host: bad, Path: "/bin/true"}); err == nil {
			t.Errorf("a daemon on host %q started", bad)
		}
	}
	ds, err := Daemons(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 3 || !ds[0].Alive || !ds[1].Alive || ds[2].Alive || ds[0].PID != polite.PID || ds[2].Host != "h2" {
		t.Fatalf("daemons %+v", ds)
	}
	stopped, err := StopDaemons(name, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 3 {
		t.Fatalf("stopped %+v", stopped)
	}
	if s := stopped[0]; s.Early || s.Killed {
		t.Errorf("h0, which exits on SIGTERM: %+v", s)
	}
	if s := stopped[1]; s.Early || !s.Killed {
		t.Errorf("h1, which ignores SIGTERM: %+v", s)
	}
	if s := stopped[2]; !s.Early || s.LogTail != "cannot open the device" {
		t.Errorf("h2, which exited by itself: %+v", s)
	}
	for _, d := range []*Daemon{polite, stubborn, early} {
		if d.Running() {
			t.Errorf("pid %d still runs", d.PID)
		}
	}
	if _, err := os.Stat(StateDir(name)); !os.IsNotExist(err) {
		t.Errorf("the state dir after StopDaemons: %v", err)
	}
	if ds, err := Daemons(name); err != nil || len(ds) != 0 {
		t.Errorf("daemons after StopDaemons: %v %v", ds, err)
	}
}

// TestProcStat reads this process's state and start time, and a command
// name with spaces and parentheses does not confuse it.
func TestProcStat(t *testing.T) {
	st, err := procStat(os.Getpid())
	if err != nil || st.start == 0 || st.state != 'R' && st.state != 'S' {
		t.Fatalf("procStat: %+v, %v", st, err)
	}
	d := Daemon{PID: os.Getpid(), Start: st.start}
	if !d.Running() {
		t.Error("this process does not run")
	}
	d.Start++
	if d.Running() {
		t.Error("a process of another start time runs")
	}
	if _, err := procStat(-1); err == nil {
		t.Error("pid -1 has a stat")
	}
}
