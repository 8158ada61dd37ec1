package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// benchmarks are the names `xam bench` knows; "all" runs them all.
var benchmarks = []string{"ssam", "logp", "engine", "hostile"}

const benchUsage = "bench ssam|logp|engine|hostile|all [--count N] [--bulk BYTES] [--clients N] [--flood N] [--mode auto|generic|native] [--json] [--out DIR]"

// runBench runs the named benchmarks, each on a lab of its own.
func runBench(e *env, args []string) error {
	var names []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		names, args = append(names, args[0]), args[1:]
	}
	fs := newFlags(e, "bench", benchUsage)
	count := fs.Int("count", 20000, "round trips per path, and calls timed per cost")
	bulk := fs.Int64("bulk", 64<<20, "bytes of each bandwidth run (SSAM bulk write, AM-II Stores, TCP stream, UDP blast)")
	mode := fs.String("mode", "auto", "XDP attach mode: auto (as xam doctor recommends), generic or native")
	clients := fs.Int("clients", 7, "logp: the most clients of the contention experiment")
	flood := fs.Int("flood", 100_000, "hostile: forged frames of the wire scenario (pings: --count/10)")
	asJSON := fs.Bool("json", false, "print the results as one JSON document (an object with a member per benchmark) instead of Markdown")
	out := fs.String("out", "", "ssam: also write plots of the round-trip distributions into this directory")
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	names = append(names, fs.Args()...)
	if len(names) == 0 {
		return usageError("name a benchmark: %s or all", strings.Join(benchmarks, ", "))
	}
	for _, n := range names {
		if n == "all" {
			names = benchmarks
			break
		}
		known := false
		for _, b := range benchmarks {
			known = known || n == b
		}
		if !known {
			return usageError("unknown benchmark %q (have: %s, all)", n, strings.Join(benchmarks, ", "))
		}
	}
	if *count < 1 {
		return usageError("--count %d: want at least 1", *count)
	}
	if *bulk < 1 {
		return usageError("--bulk %d: want at least 1 byte", *bulk)
	}
	if *clients < 1 || *clients > 64 {
		return usageError("--clients %d: want 1..64", *clients)
	}
	if *flood < 1 {
		return usageError("--flood %d: want at least 1", *flood)
	}
	m, err := loader.ParseMode(*mode)
	if err != nil {
		return usageError("--mode: %v", err)
	}
	plots := false
	for _, n := range names {
		plots = plots || n == "ssam"
		if n == "logp" && *count < 100 {
			return usageError("--count %d: logp needs at least 100", *count)
		}
	}
	if *out != "" && !plots {
		return usageError("--out: only ssam draws plots so far")
	}
	if err := needPrivileges("xam bench"); err != nil {
		return err
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	// A signal stops a benchmark before its next measurement: what was
	// measured is printed, and xam exits 130. A measurement in progress
	// finishes first (within the grace time; a second signal stops at once).
	in := watchInterrupts(e, "what was measured follows once the measurement in progress ends")
	in.grace = benchGrace
	defer in.release()
	cfg := bench.SSAMTablesConfig{Count: *count, Bulk: *bulk, Mode: m, Stop: in.flag()}
	results := map[string]any{}
	for _, n := range names {
		if in.interrupted() {
			break
		}
		var r any
		var err error
		switch n {
		case "ssam":
			r, err = benchSSAM(e, in, cfg, *asJSON, *out)
		case "logp":
			r, err = benchLogP(e, in, bench.LogPConfig{Count: *count, Clients: *clients, Mode: m, Stop: in.flag()}, *asJSON)
		case "engine":
			r, err = benchEngine(e, in, bench.EngineConfig{Count: *count, Bulk: *bulk, Mode: m, Stop: in.flag()}, *asJSON)
		case "hostile":
			r, err = benchHostile(e, in, bench.HostileConfig{Pings: max(*count/10, 100), Flood: *flood}, *asJSON)
		}
		if err != nil {
			return err
		}
		results[n] = r
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	}
	if in.interrupted() {
		return fmt.Errorf("%w: the results hold what was measured", errInterrupted)
	}
	return nil
}

// benchGrace is how long a benchmark has, after a signal, to end the
// measurement in progress, print and remove its lab.
const benchGrace = 30 * time.Second

// withLab builds a two-host lab for benchmark what, runs f on it and
// removes it afterwards (also on failure, and on an interrupt).
func withLab(e *env, in *interrupts, what string, f func(l *lab.Lab, pa, pb bench.Place) error) (err error) {
	return withLabConfig(e, in, what, lab.Config{Name: fmt.Sprintf("bench%d", os.Getpid())}, f)
}

// withLabConfig is withLab on a lab built with cfg.
func withLabConfig(e *env, in *interrupts, what string, cfg lab.Config, f func(l *lab.Lab, pa, pb bench.Place) error) (err error) {
	name := cfg.Name
	l, err := lab.Up(cfg)
	if err != nil {
		return err
	}
	in.onExit(l.Down)
	defer func() {
		if derr := l.Down(); derr != nil && err == nil {
			err = fmt.Errorf("removing lab %s: %w", name, derr)
		}
	}()
	a, b := l.Hosts[0], l.Hosts[1]
	pa := bench.Place{Ifindex: a.Index, MAC: a.MAC, Do: a.Do}
	pb := bench.Place{Ifindex: b.Index, MAC: b.MAC, Do: b.Do}
	fmt.Fprintf(e.stderr, "xam bench %s: lab %s: %s %v (%v) <-> %s %v (%v)\n", what, name, a.NS, a.MAC, a.Addr, b.NS, b.MAC, b.Addr)
	return f(l, pa, pb)
}

// benchHostile runs the hostile suite, and prints its table unless asJSON.
func benchHostile(e *env, in *interrupts, cfg bench.HostileConfig, asJSON bool) (r *bench.HostileResult, err error) {
	err = withLab(e, in, "hostile", func(_ *lab.Lab, pa, pb bench.Place) error {
		if r, err = bench.RunHostile(pa, pb, cfg); err != nil || asJSON {
			return err
		}
		return r.Markdown(e.stdout)
	})
	return r, err
}

// benchEngine measures the firmware engine's rates, round trips and bulk
// goodput beside their peers, on two labs: one of the default MTU, and
// one of bench.BulkMTU for the bulk runs; it prints the tables as Markdown
// unless asJSON.
func benchEngine(e *env, in *interrupts, cfg bench.EngineConfig, asJSON bool) (r *bench.EngineResult, err error) {
	cfg.Progress = func(what string) { fmt.Fprintf(e.stderr, "  measuring %s ...\n", what) }
	err = withLab(e, in, "engine", func(_ *lab.Lab, pa, pb bench.Place) error {
		bcfg := lab.Config{Name: fmt.Sprintf("bulk%d", os.Getpid()), MTU: bench.BulkMTU}
		return withLabConfig(e, in, "engine (bulk)", bcfg, func(bl *lab.Lab, ba, bb bench.Place) error {
			r, err = bench.RunEngine(pa, pb, ba, bb, bl.Hosts[0].Addr.Addr(), bl.Hosts[1].Addr.Addr(), cfg)
			if err != nil || asJSON {
				return err
			}
			return r.Markdown(e.stdout)
		})
	})
	return r, err
}

// benchLogP measures AM-II's LogP table and the contention experiment,
// and prints them as Markdown unless asJSON.
func benchLogP(e *env, in *interrupts, cfg bench.LogPConfig, asJSON bool) (r *bench.LogPResult, err error) {
	err = withLab(e, in, "logp", func(_ *lab.Lab, pa, pb bench.Place) error {
		if r, err = bench.RunLogP(pa, pb, cfg); err != nil || asJSON {
			return err
		}
		return r.Markdown(e.stdout)
	})
	return r, err
}

// benchSSAM measures SSAM's tables on a two-host lab built for the run, and
// prints them as Markdown unless asJSON.
func benchSSAM(e *env, in *interrupts, cfg bench.SSAMTablesConfig, asJSON bool, out string) (t *bench.SSAMTables, err error) {
	err = withLab(e, in, "ssam", func(l *lab.Lab, pa, pb bench.Place) error {
		a, b := l.Hosts[0], l.Hosts[1]
		cfg.Progress = func(what string) { fmt.Fprintf(e.stderr, "  measuring %s ...\n", what) }
		if t, err = bench.RunSSAMTables(pa, pb, a.Addr.Addr(), b.Addr.Addr(), cfg); err != nil {
			return err
		}
		t.Setup = bench.Setup{
			Kernel: netdev.Probe().Kernel,
			CPUs:   runtime.NumCPU(),
			Lab:    "a 2-host veth lab (network namespaces " + a.NS + ", " + b.NS + ")",
		}
		if out != "" && !t.Interrupted { // an interrupted run may lack round trips to plot
			paths, err := t.Plot(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "xam bench ssam: wrote %s\n", strings.Join(paths, ", "))
		}
		if asJSON {
			return nil
		}
		return t.Markdown(e.stdout)
	})
	return t, err
}
