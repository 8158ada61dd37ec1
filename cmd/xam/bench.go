package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// benchmarks are the names `xam bench` knows; "all" runs them all.
var benchmarks = []string{"ssam", "logp", "amii", "engine", "incast", "grim", "hostile"}

const benchUsage = "bench ssam|logp|amii|engine|incast|grim|hostile|all [--count N] [--bulk BYTES] [--clients N] [--flood N] [--senders LIST] [--sizes LIST] [--port-rate BPS] [--port-buffer BYTES] [--runs N] [--mode auto|generic|native] [--json] [--out DIR]"

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
	out := fs.String("out", "", "ssam, incast, grim: also write plots into this directory")
	senders := fs.String("senders", "1,2,3,7", "incast: numbers of senders, e.g. 1,2,3,7")
	sizes := fs.String("sizes", "1k,4k,8k,16k", "incast: message sizes, e.g. 1k,4k,16k,64k")
	portRate := fs.String("port-rate", "100mbit", "incast: bits per second of each switch port (tbf), e.g. 100mbit, 1gbit")
	portBuffer := fs.String("port-buffer", "16k", "incast: bytes each switch port queues (the tbf's limit)")
	runs := fs.Int("runs", 3, "incast: runs per point (the median is reported)")
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
	icfg, err := incastFlags(*senders, *sizes, *portRate, *portBuffer)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "bulk" {
			icfg.Bytes = *bulk // all senders' together, per measurement
		}
	})
	if *runs < 1 || *runs > 100 {
		return usageError("--runs %d: want 1..100", *runs)
	}
	icfg.Runs = *runs
	m, err := loader.ParseMode(*mode)
	if err != nil {
		return usageError("--mode: %v", err)
	}
	plots := false
	for _, n := range names {
		plots = plots || n == "ssam" || n == "incast" || n == "grim"
		if n == "logp" && *count < 100 {
			return usageError("--count %d: logp needs at least 100", *count)
		}
	}
	if *out != "" && !plots {
		return usageError("--out: only ssam, incast and grim draw plots")
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
		case "incast":
			icfg.Mode, icfg.Stop = m, in.flag()
			r, err = benchIncast(e, in, icfg, *asJSON, *out)
		case "engine":
			r, err = benchEngine(e, in, bench.EngineConfig{Count: *count, Bulk: *bulk, Mode: m, Stop: in.flag()}, *asJSON)
		case "amii":
			ac := bench.AMIIBandwidthConfig{Messages: 10 * *count, Mode: m, Stop: in.flag()}
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "bulk" {
					ac.Bulk = *bulk
				}
			})
			r, err = benchAMII(e, in, ac, *asJSON)
		case "grim":
			gc := bench.GRIMConfig{Count: min(*count, 5000), Mode: m, Stop: in.flag()}
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "bulk" {
					gc.Bulk = *bulk
				}
			})
			r, err = benchGRIM(e, in, gc, *asJSON, *out)
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

// incastBench is the incast benchmark's configuration from the command
// line: the experiment's, and the switch's port rate and buffer.
type incastBench struct {
	bench.IncastConfig
	rate   uint64
	buffer uint32
}

// incastFlags parses the incast flags.
func incastFlags(senders, sizes, rate, buffer string) (incastBench, error) {
	var c incastBench
	for part := range strings.SplitSeq(senders, ",") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 15 {
			return c, usageError("--senders %q: want numbers 1..15, e.g. 1,2,3", senders)
		}
		c.Senders = append(c.Senders, n)
	}
	for part := range strings.SplitSeq(sizes, ",") {
		n, err := parseSize(part)
		if err != nil || n < 1 || n > 256<<10 {
			return c, usageError("--sizes %q: want sizes 1..256k, e.g. 1k,4k,64k", sizes)
		}
		c.Sizes = append(c.Sizes, int(n))
	}
	r, err := parseRate(rate)
	if err != nil || r < 1_000_000 || r > 100_000_000_000 {
		return c, usageError("--port-rate %q: want 1m..100g bits per second", rate)
	}
	b, err := parseSize(buffer)
	if err != nil || b < 4<<10 || b > 64<<20 {
		return c, usageError("--port-buffer %q: want 4k..64m bytes", buffer)
	}
	c.rate, c.buffer = r, uint32(b)
	c.LinkRate, c.PortBuffer = r, int(b)
	return c, nil
}

// benchIncast runs the incast experiment on a star lab built for it (the
// most senders plus a receiver, joined by a switch whose ports are
// shaped), prints its table unless asJSON, and plots it into out if set.
func benchIncast(e *env, in *interrupts, c incastBench, asJSON bool, out string) (r *bench.IncastResult, err error) {
	hosts := slices.Max(c.Senders) + 1
	cfg := lab.Config{Name: fmt.Sprintf("incast%d", os.Getpid()), Hosts: hosts, Switch: true, PortRate: c.rate, PortBuffer: c.buffer}
	err = withLabConfig(e, in, "incast", cfg, func(l *lab.Lab, _, _ bench.Place) error {
		var places []bench.Place
		var addrs []netip.Addr
		for _, h := range l.Hosts {
			places = append(places, bench.Place{Ifindex: h.Index, MAC: h.MAC, Do: h.Do})
			addrs = append(addrs, h.Addr.Addr())
		}
		rx := hosts - 1
		ic := c.IncastConfig
		ic.Progress = func(what string) { fmt.Fprintf(e.stderr, "  measuring %s ...\n", what) }
		ic.Drops = func() (uint64, error) { return l.Switch.PortDrops(rx) }
		if r, err = bench.RunIncast(places[:rx], places[rx], addrs[:rx], addrs[rx], ic); err != nil {
			return err
		}
		if out != "" && len(r.Points) > 0 {
			paths, err := r.Plot(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "xam bench incast: wrote %s\n", strings.Join(paths, ", "))
		}
		if asJSON {
			return nil
		}
		fmt.Fprintf(e.stdout, "Switch ports shaped to %d bit/s, %d bytes of buffer each.\n\n", c.rate, c.buffer)
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

// benchAMII measures AM-II's bandwidth against message size on a lab of
// MTU bench.BulkMTU and prints it as Markdown unless asJSON.
func benchAMII(e *env, in *interrupts, cfg bench.AMIIBandwidthConfig, asJSON bool) (r *bench.AMIIBandwidth, err error) {
	cfg.Progress = func(what string) { fmt.Fprintf(e.stderr, "  measuring %s ...\n", what) }
	lc := lab.Config{Name: fmt.Sprintf("amii%d", os.Getpid()), MTU: bench.BulkMTU}
	err = withLabConfig(e, in, "amii", lc, func(l *lab.Lab, pa, pb bench.Place) error {
		if r, err = bench.RunAMIIBandwidth(pa, pb, l.Hosts[0].Addr.Addr(), l.Hosts[1].Addr.Addr(), cfg); err != nil || asJSON {
			return err
		}
		return r.Markdown(e.stdout)
	})
	return r, err
}

// benchGRIM measures GRIM's figures beside its peers on a lab and prints
// them as Markdown unless asJSON; with out, it draws the plots there.
func benchGRIM(e *env, in *interrupts, cfg bench.GRIMConfig, asJSON bool, out string) (r *bench.GRIMBench, err error) {
	cfg.Progress = func(what string) { fmt.Fprintf(e.stderr, "  measuring %s ...\n", what) }
	err = withLab(e, in, "grim", func(l *lab.Lab, pa, pb bench.Place) error {
		if r, err = bench.RunGRIM(pa, pb, l.Hosts[0].Addr.Addr(), l.Hosts[1].Addr.Addr(), cfg); err != nil {
			return err
		}
		if out != "" {
			paths, err := r.Plot(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "xam bench grim: wrote %s\n", strings.Join(paths, ", "))
		}
		if asJSON {
			return nil
		}
		return r.Markdown(e.stdout)
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
