package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sampleResults are results of every experiment of the report, built by
// hand (no lab runs), each figure of a value of its own so that a ratio
// computed from another figure's value shows.
func sampleResults() map[string]Reported {
	return map[string]Reported{
		"ssam": &ssamTablesResult{
			Paper: paperInfo{RTTMicros: 20, BulkMBPerSec: 5.5},
			RTT: []rttRow{{Path: "raw", RTT: RTT{P50: 4400}}, {Path: "ssam", RTT: RTT{P50: 4900}},
				{Path: "udp", RTT: RTT{P50: 15300}}, {Path: "tcp", RTT: RTT{P50: 17100}}, {Path: "packet", RTT: RTT{P50: 9200}}},
			Bandwidth: []bandwidthRow{{Path: "ssam", MBPerSec: 310}, {Path: "tcp", MBPerSec: 2100}, {Path: "udp", MBPerSec: 820}},
			Traps: []costRow{{Op: "null_syscall", NsPerCall: 90}, {Op: "send", NsPerCall: 3300}, {Op: "send16", NsPerCall: 3120},
				{Op: "recv1", NsPerCall: 110}, {Op: "recv16", NsPerCall: 470}},
			Syscalls: []costRow{{Op: "send", NsPerCall: 2700}, {Op: "send16", NsPerCall: 41210}, {Op: "recv1", NsPerCall: 950}, {Op: "recv16", NsPerCall: 17140}},
			AM:       []costRow{{Op: "request", NsPerCall: 3550}, {Op: "ack", NsPerCall: 3800}},
		},
		"logp": &logpResult{
			Rows: []logpRowResult{{Config: "baseline", Os: 2.1, Or: 1.9, G: 2.4, RTT: 10.5}, {Config: "+reliability", Os: 2.6, Or: 2.2, G: 2.9, RTT: 12.2},
				{Config: "+protection", Os: 2.8, Or: 2.3, G: 3.1, RTT: 13.7}, {Config: "+batching", Os: 2.8, Or: 2.3, G: 0.45, RTT: 13.9}},
			Contention: []contentionRow{{Clients: 1, Aggregate: 71000, RTT: 14}, {Clients: 7, Aggregate: 230000, RTT: 31}},
			UCX:        &ucxResult{Test: "ucp_am_lat", Size: 8, RTT: 19.5},
		},
		"amii": &amiiBandwidthResult{
			Rows: []amiiBandwidthRow{{Class: "short", Size: 4, MBPerS: 61}, {Class: "short", Size: 8, MBPerS: 82.4},
				{Class: "medium", Size: 1024, MBPerS: 390}, {Class: "medium", Size: 8192, MBPerS: 640},
				{Class: "bulk", Size: 16 << 10, MBPerS: 771}, {Class: "bulk", Size: 64 << 10, MBPerS: 702}},
			Raw: &BulkResult{Message: 3826, MBPerSec: 1575},
			TCP: &BulkResult{Message: 64 << 10, MBPerSec: 3120},
			UCX: &ucxResult{Test: "ucp_am_bw", Size: 64 << 10, Missing: ucxNotInstalled},
		},
		"permutations": &permutationsResult{
			Hosts: 8,
			Pair:  &permutationRow{Pattern: "one pair", PerHost: 520, RTT: 28},
			Rows: []permutationRow{{Pattern: "circular shift", PerHost: 410, Aggregate: 3280, RTT: 51}, {Pattern: "neighbour exchange", PerHost: 455, Aggregate: 3640, RTT: 46},
				{Pattern: "bisection", PerHost: 305, Aggregate: 2440, RTT: 63}},
		},
		"overcommit": &overcommitResult{Rows: []overcommitRow{{Factor: 1, Endpoints: 4, Rate: 101000}, {Factor: 4, Endpoints: 16, Rate: 83000}, {Factor: 8, Endpoints: 32, Rate: 61000}}},
		"incast": &incastResult{Points: []incastPointRow{
			{Config: "on", Senders: 1, Size: 16384, Ratio: 1, Mbps: 95},
			{Config: "on", Senders: 3, Size: 1024, Ratio: 0.9, Mbps: 85}, {Config: "off", Senders: 3, Size: 1024, Ratio: 0.8, Mbps: 76},
			{Config: "on+etr", Senders: 3, Size: 1024, Ratio: 0.9, Mbps: 86}, {Config: "tcp", Senders: 3, Size: 1024, Ratio: 0.9, Mbps: 90},
			{Config: "on", Senders: 3, Size: 16384, Ratio: 0.936, Drops: 0, Mbps: 89},
			{Config: "off", Senders: 3, Size: 16384, Ratio: 0.363, Drops: 517, Mbps: 34.5},
			{Config: "on+etr", Senders: 3, Size: 16384, Ratio: 0.52, Mbps: 49.4},
			{Config: "tcp", Senders: 3, Size: 16384, Ratio: 0.71, Mbps: 67.5},
		}},
		"grim": &grimBenchResult{
			Peers: []enginePing{{Name: "grim inline", P50: 9.1}, {Name: "grim firmware", P50: 14.2}, {Name: "raw AF_XDP", P50: 5.3},
				{Name: "AM-II inline", P50: 11.7}, {Name: "kernel TCP", P50: 25.6}},
			Channels:  []grimChannelsRow{{Channels: 1, P50: 9.1, Ratio: 1}, {Channels: 16, P50: 12.3, Ratio: 1.35}},
			Gap:       []grimGap{{Burst: 100, Injected: 0.8, Answered: 4.1}, {Burst: 1000, Injected: 2.2, Answered: 6.3}, {Burst: 2000, Injected: 2.5, Answered: 6.9}},
			Bandwidth: []grimBandwidthRow{{Size: 16 << 10, CutThrough: 250, StoreForward: 240}, {Size: 48 << 10, CutThrough: 330, StoreForward: 270}},
			TCP48K:    &BulkResult{Message: 48 << 10, MBPerSec: 2050},
			Storage:   []enginePing{{Name: "host", P50: 21.5}, {Name: "storage", P50: 27.8}},
			Injection: []costRow{{Op: "grim_short", NsPerCall: 420}, {Op: "send", NsPerCall: 3300}},
		},
	}
}

// sampleFiguresReport is a report of every experiment's figures from
// three runs of sampleResults, each scaled differently (perturb), written
// into dir with the plot CheckReport asks of each.
func sampleFiguresReport(t *testing.T, dir string) *Report {
	t.Helper()
	r := &Report{Command: "xam bench all --quick", Quick: true, Runs: 3}
	var runs []map[string]Reported
	for i, k := range []float64{1, 0.95, 1.1} {
		res := sampleResults()
		if i > 0 {
			for _, x := range res {
				perturb(x, k)
			}
		}
		runs = append(runs, res)
	}
	plot := filepath.Join(dir, "plot.svg")
	if err := os.WriteFile(plot, []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		paper Section
		exps  []string
	}{
		{PaperSSAMSection, []string{"ssam"}}, {PaperAMII, []string{"logp", "amii", "permutations", "overcommit"}},
		{PaperDVCM, []string{"incast"}}, {PaperGRIM, []string{"grim"}},
	} {
		sec := NewSection(s.paper)
		r.Sections = append(r.Sections, sec)
		for _, name := range s.exps {
			e := sec.Add(NewExperiment(name))
			var figs [][]Figure
			for _, run := range runs {
				figs = append(figs, run[name].Figures())
			}
			e.Figures, e.Runs = mergeFigures(figs), len(figs)
			if len(e.Figures) == 0 {
				t.Fatalf("%s: no figures", name)
			}
			e.Plots = []string{filepath.Base(plot)}
			e.Finish(0, false, nil)
		}
	}
	if _, err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	return r
}

// jsonMeasured is a figure of several runs as report.json holds it, read
// independently of Measured.
type jsonMeasured struct {
	Runs      []float64 `json:"runs"`
	Median    float64   `json:"median"`
	Min       float64   `json:"min"`
	Max       float64   `json:"max"`
	Unsettled bool      `json:"unsettled"`
}

// jsonFigure is a figure as report.json holds it, read independently of
// Figure: a ratio absent from the JSON is nil.
type jsonFigure struct {
	Name    string        `json:"name"`
	Paper   *float64      `json:"paper"`
	Today   jsonMeasured  `json:"today"`
	VsPaper *jsonMeasured `json:"today_vs_paper"`
	Peers   []struct {
		Name    string        `json:"name"`
		Value   jsonMeasured  `json:"value"`
		Ratio   *jsonMeasured `json:"ratio"`
		Missing string        `json:"missing"`
	} `json:"peers"`
}

// readFigures returns the figures of report.json in dir by experiment.
func readFigures(t *testing.T, dir string) map[string][]jsonFigure {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Sections []struct {
			Experiments []struct {
				Name    string       `json:"name"`
				Figures []jsonFigure `json:"figures"`
			} `json:"experiments"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	figs := map[string][]jsonFigure{}
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			figs[e.Name] = e.Figures
		}
	}
	return figs
}

// near reports whether got is want to four significant digits.
func near(got, want float64) bool {
	if want == 0 {
		return got == 0
	}
	return math.Abs(got-want) <= 1e-3*math.Abs(want)
}

// checkRunRatios checks that got holds num over den, run by run, with
// its median, lowest and highest.
func checkRunRatios(t *testing.T, what string, got *jsonMeasured, num, den []float64) bool {
	t.Helper()
	if got == nil || len(got.Runs) != len(num) || len(num) != len(den) {
		t.Errorf("%s: %+v, want %v over %v", what, got, num, den)
		return false
	}
	var want []float64
	for i := range num {
		want = append(want, num[i]/den[i])
		if !near(got.Runs[i], want[i]) {
			t.Errorf("%s: run %d: %g, want %g/%g", what, i+1, got.Runs[i], num[i], den[i])
		}
	}
	slices.Sort(want)
	if !near(got.Median, want[len(want)/2]) || !near(got.Min, want[0]) || !near(got.Max, want[len(want)-1]) {
		t.Errorf("%s: median %g [%g, %g], want %g [%g, %g]", what, got.Median, got.Min, got.Max, want[len(want)/2], want[0], want[len(want)-1])
	}
	return true
}

// TestFiguresRatios builds the report of three runs of every experiment
// from results made by hand and recomputes every ratio in its
// report.json from the figures, run by run: today over the paper's,
// absent where the paper gives no number, and today over each measured
// peer's. Figures that share a slice of peers (the AM-II bandwidth
// classes, incast's configurations) must each hold their own ratios.
func TestFiguresRatios(t *testing.T) {
	dir := t.TempDir()
	sampleFiguresReport(t, dir)
	byExp := readFigures(t, dir)
	checked := 0
	for exp, figs := range byExp {
		for _, f := range figs {
			if len(f.Today.Runs) != 3 {
				t.Errorf("%s: %q: runs %v, want 3", exp, f.Name, f.Today.Runs)
			}
			switch {
			case f.Paper != nil && *f.Paper != 0:
				paper := []float64{*f.Paper, *f.Paper, *f.Paper}
				if checkRunRatios(t, exp+": "+f.Name+": today_vs_paper", f.VsPaper, f.Today.Runs, paper) {
					checked++
				}
			case f.VsPaper != nil:
				t.Errorf("%s: %q: today_vs_paper %+v without a paper figure, want it absent", exp, f.Name, *f.VsPaper)
			}
			for _, p := range f.Peers {
				switch {
				case p.Missing == "" && !slices.Contains(p.Value.Runs, 0):
					if checkRunRatios(t, fmt.Sprintf("%s: %s: ratio to %q", exp, f.Name, p.Name), p.Ratio, f.Today.Runs, p.Value.Runs) {
						checked++
					}
				case p.Missing != "" && p.Ratio != nil:
					t.Errorf("%s: %q: ratio to %q %+v, which is missing, want none", exp, f.Name, p.Name, *p.Ratio)
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d ratios, want every experiment's", checked)
	}
	// The two of the report that showed another figure's ratio.
	find := func(exp, prefix, peerName string) (today, value, ratio float64) {
		t.Helper()
		for _, f := range byExp[exp] {
			if !strings.HasPrefix(f.Name, prefix) {
				continue
			}
			for _, p := range f.Peers {
				if p.Name == peerName && p.Ratio != nil {
					return f.Today.Runs[0], p.Value.Runs[0], p.Ratio.Runs[0]
				}
			}
		}
		t.Fatalf("%s: no figure %q with peer %q", exp, prefix, peerName)
		return
	}
	if today, raw, r := find("amii", "node-to-node bandwidth, short messages", "raw AF_XDP frames"); today != 82.4 || raw != 1575 || !near(r, 82.4/1575) {
		t.Errorf("AM-II short messages: %g over raw %g is %g, want %.4g", today, raw, r, 82.4/1575)
	}
	if today, off, r := find("incast", "goodput of 3 senders at 16384 B over one sender's, coordinated", "no coordination"); today != 0.936 || off != 0.363 || !near(r, 0.936/0.363) {
		t.Errorf("incast coordinated: %g over no coordination %g is %g, want %.4g", today, off, r, 0.936/0.363)
	}
	if err := CheckReport(dir); err != nil {
		t.Errorf("CheckReport: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| node-to-node bandwidth, short messages (the best of 4–8 B) | MB/s | 31 MB/s peak (bulk) | 82.4 [",
		"| ↳ peer: UCX AM over TCP (ucp_am_bw, 65536 B) | | | " + ucxNotInstalled + " | — |",
		"| node-to-node bandwidth, bulk messages (the best of 16384–65536 B) | MB/s | 31.0 | 771 [",
		", coordinated | ratio | a large fraction of link bandwidth; loss under 0.1% | 0.936 [",
		"| ↳ peer: no coordination | ratio | | 0.363 [",
	} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

// TestCheckReportRatios: CheckReport recomputes the ratios of report.json
// and names a wrong one, a ratio to the paper where the paper gives no
// number, a ratio missing, a median not of its runs, and a figure
// unsettled or not against its runs.
func TestCheckReportRatios(t *testing.T) {
	dir := t.TempDir()
	sampleFiguresReport(t, dir)
	js := filepath.Join(dir, "report.json")
	orig, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(orig, &r); err != nil {
		t.Fatal(err)
	}
	fig := func(exp, prefix string) *Figure {
		for _, s := range r.Sections {
			for _, e := range s.Experiments {
				for i, f := range e.Figures {
					if e.Name == exp && strings.HasPrefix(f.Name, prefix) {
						return &e.Figures[i]
					}
				}
			}
		}
		t.Fatalf("%s: no figure %q", exp, prefix)
		return nil
	}
	short := "node-to-node bandwidth, short messages"
	for _, tc := range []struct {
		name   string
		tamper func()
		want   string
	}{
		{"a peer's ratio", func() { fig("amii", short).Peers[0].Ratio.Runs[1] *= 2 }, `ratio to peer "raw AF_XDP frames" is [`},
		{"a ratio to no paper figure", func() { m := measure(1, 1, 1); fig("amii", short).VsPaper = &m }, `today_vs_paper is [1 1 1], want none`},
		{"a ratio to the paper", func() { fig("amii", "node-to-node bandwidth, bulk").VsPaper.Runs[0] /= 10 }, `today_vs_paper is [`},
		{"no ratio", func() { fig("amii", short).Peers[0].Ratio = nil }, `no ratio to peer "raw AF_XDP frames"`},
		{"a median", func() { fig("grim", "gap, burst of 100").Today.Median *= 3 }, `figure "gap, burst of 100": today: median`},
		{"a flag", func() { f := fig("grim", "gap, burst of 100"); f.Today.Unsettled = !f.Today.Unsettled }, `figure "gap, burst of 100": today: unsettled`},
	} {
		if err := json.Unmarshal(orig, &r); err != nil {
			t.Fatal(err)
		}
		tc.tamper()
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(js, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CheckReport(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckReport: %v, want %q", tc.name, err, tc.want)
		}
	}
}
