package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
)

// TestFwCoordFlags: the coordination module's flags reach the module that
// `xam fw --module coord` loads: its threshold, Early Token Release and
// pacing (the ports' rate and buffer). Before, the module could not pace
// in firmware mode: there were no flags for LinkRate and PortBuffer.
func TestFwCoordFlags(t *testing.T) {
	// load parses args with the registered modules' flags and loads the
	// modules that names lists.
	load := func(names string, args ...string) []fwModule {
		t.Helper()
		fs := flag.NewFlagSet("fw", flag.ContinueOnError)
		mf := declareModules(fs, nicfw.ModuleKinds())
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		mods, err := mf.load(names)
		if err != nil {
			t.Fatal(err)
		}
		return mods
	}
	mods := load("coord", "--coord-threshold", "2048", "--coord-early", "3000", "--coord-link-rate", "100mbit", "--coord-port-buffer", "16k")
	if len(mods) != 1 {
		t.Fatalf("%d modules, want 1", len(mods))
	}
	m, ok := mods[0].mod.(*coord.Module)
	if !ok {
		t.Fatalf("module %T, want *coord.Module", mods[0].mod)
	}
	got := m.Config()
	want := coord.Config{Threshold: 2048, EarlyRelease: 3000, LinkRate: 100_000_000, PortBuffer: 16 << 10, Retry: coord.DefaultRetry}
	if got.Threshold != want.Threshold || got.EarlyRelease != want.EarlyRelease || got.LinkRate != want.LinkRate ||
		got.PortBuffer != want.PortBuffer || got.Retry != want.Retry {
		t.Errorf("the module's configuration is %+v, want %+v", got, want)
	}
	if d := mods[0].describe(); !strings.Contains(d, "paced to 100000000 bit/s and a 16384-byte port buffer") {
		t.Errorf("the daemon would say %q", d)
	}

	// Without the pacing flags the module does not pace, and says so.
	mods = load("coord")
	if c := mods[0].mod.(*coord.Module).Config(); c.Threshold != coord.DefaultThreshold || c.LinkRate != 0 || c.PortBuffer != 0 {
		t.Errorf("no pacing flags, yet %+v", c)
	}
	if d := mods[0].describe(); !strings.Contains(d, "not paced") {
		t.Errorf("the daemon would say %q", d)
	}
	if mods := load(""); len(mods) != 0 {
		t.Errorf("no --module: %v", mods)
	}
}

// TestFwCoordUsage: wrong coordination and retransmission flags are
// refused with what is wrong, in one line, with exit status 2, before the
// daemon needs its device or privileges.
func TestFwCoordUsage(t *testing.T) {
	base := []string{"fw", "--dev", "x", "--map"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--coord-link-rate", "100mbit"}, "--coord-link-rate needs --module coord"},
		{[]string{"--coord-threshold", "100"}, "--coord-threshold needs --module coord"},
		{[]string{"--module", "coord", "--coord-port-buffer", "16k"}, "--coord-port-buffer needs --coord-link-rate"},
		{[]string{"--module", "coord", "--coord-link-rate", "fast"}, `--coord-link-rate: "fast": want a rate such as 100mbit or 1gbit`},
		{[]string{"--module", "coord", "--coord-link-rate", "0"}, `--coord-link-rate: "0": want a rate`},
		{[]string{"--module", "coord", "--coord-link-rate", "1gbit", "--coord-port-buffer", "100"}, `--coord-port-buffer "100": want a size from 1k to 1g`},
		{[]string{"--module", "coord", "--coord-link-rate", "1gbit", "--coord-port-buffer", "lots"}, `--coord-port-buffer "lots": want a size from 1k to 1g`},
		{[]string{"--module", "coord", "--coord-early", "-1"}, "--coord-early -1: want 0 or more bytes"},
		{[]string{"--module", "coord,coord"}, "--module coord given twice"},
		{[]string{"--retransmit", "0s"}, "--retransmit 0s: want a positive duration below --give-up (3s)"},
		{[]string{"--retransmit", "5s"}, "--retransmit 5s: want a positive duration below --give-up (3s)"},
		{[]string{"--ack-delay", "5ms"}, "--ack-delay 5ms: want less than --retransmit (5ms)"},
		{[]string{"--reply-ack-delay", "-1us"}, "--reply-ack-delay -1µs: want 0 (at the next poll) or a positive duration"},
	} {
		args := append(append([]string(nil), base...), tc.args...)
		code, out, errs := xam(t, nil, args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("xam %v: exit %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, out, errs, tc.want)
		}
	}
	// A retransmission time below the give-up time passes the checks (and
	// stops later, at the missing device or privileges).
	if _, _, errs := xam(t, nil, append(base, "--retransmit", "50ms", "--give-up", time.Second.String())...); strings.Contains(errs, "--retransmit") {
		t.Errorf("--retransmit 50ms refused: %s", errs)
	}
}

// TestFwMaxConnsTotal: `xam fw --max-conns-total` bounds the connections of
// all users together; a bound below 1 is a usage error.
func TestFwMaxConnsTotal(t *testing.T) {
	code, out, errs := xam(t, nil, "fw", "--dev", "x", "--map", "--max-conns-total", "0")
	if code != 2 || out != "" || !strings.Contains(errs, "--max-conns-total 0: want at least 1") {
		t.Errorf("--max-conns-total 0: exit %d, %q %q", code, out, errs)
	}
	if _, out, _ := xam(t, nil, "fw", "-h"); !strings.Contains(out, "-max-conns-total") || !strings.Contains(out, "xam fw grant --tag T") {
		t.Errorf("fw -h:\n%s", out)
	}
}

// TestFwMetricsUsage: a --metrics address that is not HOST:PORT is a usage
// error, in one line, before the daemon needs its device or privileges; a
// good one passes the checks (and stops later, at the missing device).
func TestFwMetricsUsage(t *testing.T) {
	base := []string{"fw", "--dev", "nosuchdevice", "--map", "--metrics"}
	for _, addr := range []string{"9464", "127.0.0.1", "127.0.0.1:http-alt", "127.0.0.1:65536", "127.0.0.1:-1", "[::1", "bad host:9464", "a_b:9464", ":"} {
		code, out, errs := xam(t, nil, append(base, addr)...)
		want := fmt.Sprintf("xam fw: --metrics %q: want HOST:PORT or :PORT, e.g. 127.0.0.1:9464 or :9464\n", addr)
		if code != 2 || out != "" || errs != want {
			t.Errorf("--metrics %q: exit %d, stdout %q, stderr %q; want 2 and %q", addr, code, out, errs, want)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", ":0"} {
		if code, _, errs := xam(t, nil, append(base, addr)...); code == 2 || strings.Contains(errs, "want HOST:PORT") {
			t.Errorf("--metrics %q refused: exit %d, %s", addr, code, errs)
		}
	}
	if _, out, _ := xam(t, nil, "fw", "-h"); !strings.Contains(out, "[--metrics ADDR]") || !strings.Contains(out, "-metrics string") {
		t.Errorf("fw -h:\n%s", out)
	}
}

// TestFwJobUsage: `xam fw --job` and `--hostfile` learn this host's id and
// the peers from the job, so --id, --host and --map are refused with them,
// in one line with exit status 2, as is --job outside a Slurm step, saying
// what is missing.
func TestFwJobUsage(t *testing.T) {
	for _, v := range []string{"SLURM_PROCID", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_NODELIST", "PMI_FD"} {
		t.Setenv(v, "")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--job", "--dev", "eth0", "--id", "1"}, "--job: this host's id comes from the job (its node's index in the job's nodes): no --id"},
		{[]string{"--job", "--dev", "eth0", "--host", "1=02:00:00:00:00:01"}, "--job: the peers come from the job: no --host"},
		{[]string{"--job", "--dev", "eth0", "--map"}, "--job: the peers come from the job, not from the mapper: no --map"},
		{[]string{"--job", "--dev", "eth0", "--hostfile", "f", "--rank", "0"}, "--job learns the job from Slurm: no --hostfile or --rank"},
		{[]string{"--job"}, "--dev is required"},
		{[]string{"--dev", "eth0", "--rank", "1"}, "--rank needs --hostfile FILE"},
		{[]string{"--hostfile", "f"}, "--hostfile needs --rank N"},
		{[]string{"--hostfile", "f", "--rank", "-1"}, "--rank -1: want 0 or more"},
		{[]string{"--hostfile", "f", "--rank", "0", "--map"}, "--hostfile: the peers come from the job, not from the mapper: no --map"},
		{[]string{"--job", "--dev", "eth0"}, "not in a Slurm job step: SLURM_PROCID is not set; run under `srun --mpi=pmi2`"},
	} {
		args := append([]string{"fw"}, tc.args...)
		code, out, errs := xam(t, nil, args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("xam %v: exit %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, out, errs, tc.want)
		}
	}
	t.Setenv("SLURM_JOB_ID", "42")
	if code, _, errs := xam(t, nil, "fw", "--job", "--dev", "eth0"); code != 2 ||
		!strings.Contains(errs, "in Slurm job 42 but not in a step started by srun") {
		t.Errorf("--job in a batch script: exit %d, %q", code, errs)
	}
	if code, _, errs := xam(t, nil, "fw", "--hostfile", "/nonexistent/hosts", "--rank", "0"); code != 1 ||
		!strings.Contains(errs, "/nonexistent/hosts: no such file or directory") {
		t.Errorf("--hostfile of no file: exit %d, %q", code, errs)
	}
	if _, out, _ := xam(t, nil, "fw", "-h"); !strings.Contains(out, "| --job | --hostfile FILE --rank N)") || !strings.Contains(out, "/run/xam/job-$SLURM_JOB_ID.sock") {
		t.Errorf("fw -h:\n%s", out)
	}
}
