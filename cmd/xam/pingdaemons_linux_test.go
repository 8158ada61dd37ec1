package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/testenv"
)

// TestPingFirmwareDaemons: `xam ping --mode firmware` measures the shape a
// lab deploys by default: an `xam fw` process per host (this test binary
// run as xam), the applications in the ping's process. Every round trip
// is answered through the two daemons, the JSON says where the engines
// ran, and the daemons are gone with the ping: no process of theirs, no
// socket.
func TestPingFirmwareDaemons(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, api := range []string{"amii", "grim"} {
		code, out, errs := xam(t, nil, "ping", "--api", api, "--mode", "firmware", "--count", "300", "--json")
		var r bench.PingResult
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 300 || r.Lost != 0 ||
			r.Config.EngineMode != "firmware" || r.Config.FWLayout != "daemons" {
			t.Errorf("ping --api %s --mode firmware: exit %d, %+v: %s %s", api, code, r.Config, out, errs)
		}
	}
	if left := daemonsOf(t, os.Getpid()); len(left) > 0 {
		t.Errorf("daemons left running after the pings: %v", left)
	}
	if socks, _ := filepath.Glob(filepath.Join(os.TempDir(), "xam-fw-*", "*.sock")); len(socks) > 0 {
		t.Errorf("sockets left behind: %v", socks)
	}
}

// daemonsOf lists the `fw` processes whose parent is pid.
func daemonsOf(t *testing.T, pid int) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, stat := range dirs {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so look after
		// its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(stat), "cmdline"))
		if args := strings.Split(string(cmd), "\x00"); len(args) > 1 && args[1] == "fw" {
			out = append(out, strings.Join(args, " "))
		}
	}
	return out
}

// TestIdleDaemons: the daemons of a lab (`xam lab up --fw`, the default
// `xam fw`) take no processor while nothing happens: each polls a while
// after its last work, then blocks. A busy-polling daemon took a whole one.
func TestIdleDaemons(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("idle%d", os.Getpid())
	code, up, errs, _ := labUpFw(t, name)
	if code != 0 {
		t.Fatalf("lab up --fw: exit %d: %s", code, errs)
	}
	const window = 2 * time.Second
	before := make([]time.Duration, len(up.Daemons))
	for i, d := range up.Daemons {
		before[i] = cpuTime(t, d.PID)
	}
	time.Sleep(window) // the quiet to measure, not a wait for an event
	for i, d := range up.Daemons {
		// At most 5% of a processor (the aim is under 1%), where a busy
		// poll takes all of one even on a loaded machine.
		if used := cpuTime(t, d.PID) - before[i]; used > window/20 {
			t.Errorf("daemon of %s (pid %d) used %v of the processor in %v of quiet", d.Host, d.PID, used, window)
		}
	}
}

// cpuTime is the processor time process pid has used, user and system.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	// After the command: state (f[0]), ..., utime f[11], stime f[12], in
	// clock ticks of 1/100 s (USER_HZ).
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
