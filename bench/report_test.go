package bench

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
)

// reportDir, when set, names the directory of a report that `xam bench
// all` wrote, for TestReportStructure to check (CI sets it).
var reportDir = flag.String("report", "", "check the structure of the report in this directory")

// TestReportStructure checks the report in -report, if given: a section
// per paper, every experiment run and ok, every figure measured in at
// least three runs with its median, lowest and highest consistent, every
// unsettled figure shown as such and listed in the summary, the table of
// claims with a verdict per claim, every plot written (CheckReport). It
// checks no speed.
func TestReportStructure(t *testing.T) {
	if *reportDir == "" {
		t.Skip("no -report given: the report of `xam bench all` is checked by CI")
	}
	if err := CheckReport(*reportDir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(*reportDir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(*reportDir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Runs < 3 {
		t.Errorf("%d runs of each experiment, want at least 3", r.Runs)
	}
	for _, s := range r.Sections {
		if !strings.Contains(string(md), "\n## "+s.Paper+"\n") {
			t.Errorf("report.md has no section %s", s.Paper)
		}
		for _, e := range s.Experiments {
			if e.Status != "ok" {
				t.Errorf("%s: %s %s", e.Name, e.Status, e.Error)
			}
			checkFiguresRuns(t, e, string(md))
		}
	}
	for _, sp := range Specs() {
		if sp.Paper == nil {
			continue
		}
		name := sp.Name
		found := false
		for _, s := range r.Sections {
			for _, e := range s.Experiments {
				found = found || e.Name == name
			}
		}
		if !found {
			t.Errorf("experiment %s missing from the report", name)
		}
	}
	if !strings.Contains(string(md), "\n## Reproduced?\n") {
		t.Error("report.md has no table of claims")
	}
	if len(r.Claims) != len(Claims()) {
		t.Errorf("%d claims judged, want %d", len(r.Claims), len(Claims()))
	}
	for _, c := range r.Claims {
		switch c.Verdict {
		case Yes, No, Unsettled:
		default:
			t.Errorf("claim %q (%s): verdict %q", c.Says, c.Criterion, c.Verdict)
		}
		if !strings.Contains(string(md), fmt.Sprintf("| %s | %s | %s | `%s`: %s | %s | **%s** |", c.Paper, c.Says, c.PaperValue, c.Experiment, c.Criterion, c.Measured.orNone(), c.Verdict)) {
			t.Errorf("report.md lacks the row of claim %q", c.Says)
		}
	}
}

// checkFiguresRuns checks the figures of e, as report.json holds them,
// read apart from Measured's own code: at least three runs each, lowest <=
// median <= highest, unsettled exactly when the runs lie more than 2x
// apart, and then shown in report.md (md) as a range, not a number.
func checkFiguresRuns(t *testing.T, e *Experiment, md string) {
	t.Helper()
	for _, f := range e.Figures {
		m := f.Today
		if len(m.Runs) < 3 {
			t.Errorf("%s: %q: %d runs", e.Name, f.Name, len(m.Runs))
			continue
		}
		if m.Min != slices.Min(m.Runs) || m.Max != slices.Max(m.Runs) || !(m.Min <= m.Median && m.Median <= m.Max) {
			t.Errorf("%s: %q: median %g [%g, %g] of runs %v", e.Name, f.Name, m.Median, m.Min, m.Max, m.Runs)
		}
		apart := m.Max > 2*m.Min || (m.Min <= 0 && m.Max != 0)
		if m.Min < 0 {
			apart = m.Max >= 0 || m.Min < 2*m.Max
		}
		if m.Unsettled != apart {
			t.Errorf("%s: %q: runs %v, unsettled %v", e.Name, f.Name, m.Runs, m.Unsettled)
		}
		if m.Unsettled && !strings.Contains(md, fmt.Sprintf("| %s | %s | ", f.Name, f.Unit)) || m.Unsettled && !strings.Contains(md, "unsettled: "+num(m.Min)+"–"+num(m.Max)) {
			t.Errorf("%s: %q: report.md does not show it unsettled", e.Name, f.Name)
		}
	}
}

// sampleReport is a report of four experiments, one measured in three
// runs (one of its figures unsettled), one failed, one interrupted and
// one not run, with the plots of three runs written into dir.
func sampleReport(t *testing.T, dir string) *Report {
	t.Helper()
	r := &Report{Command: "xam bench all --quick", Started: time.Unix(1e9, 0), Seconds: 42, Quick: true, Runs: 3, Setup: Setup{CPUs: 2}}
	for _, s := range []Section{PaperSSAMSection, PaperAMII, PaperDVCM, PaperGRIM} {
		r.Sections = append(r.Sections, NewSection(s))
	}
	ok := r.Sections[0].Add(NewExperiment("ssam"))
	var runs [][]Figure
	for _, v := range [][3]float64{{4.9, 4.4, 5084}, {5.1, 4.5, 5200}, {4.7, 4.2, 12000}} {
		runs = append(runs, []Figure{
			paperFig("round trip", "µs", 20, v[0], peer("raw AF_XDP", v[1]), Peer{Name: "UCX", Missing: ucxNotInstalled}),
			noteFig("trap", "ns", numbersLost, v[2]),
		})
	}
	ok.Figures, ok.Runs = mergeFigures(runs), 3
	var res []Reported
	for _, k := range []float64{1, 0.9, 1.1} {
		res = append(res, &overcommitResult{Resident: 2, Rows: []overcommitRow{{Factor: 1, Endpoints: 2, Rate: 100 * k, PerClient: 50}, {Factor: 4, Endpoints: 8, Rate: 80, PerClient: 10 * k}}})
	}
	paths, err := PlotRuns(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		ok.Plots = append(ok.Plots, filepath.Base(p))
	}
	ok.Details = []string{"# SSAM's tables\n\n## 1. Traps\n", "# run 2\n", "# run 3\n"}
	ok.Finish(time.Second, false, nil)
	r.Sections[1].Add(NewExperiment("logp")).Finish(time.Second, false, errors.New("lab: no veth"))
	r.Sections[2].Add(NewExperiment("incast")).Finish(0, true, nil)
	r.Sections[3].Add(NewExperiment("grim")) // not run
	return r
}

// TestReportFiles writes a report and reads it back: the Markdown has
// every section, the failure, each figure's median and range with a row
// per peer, the unsettled figure as a range and in the summary, the
// claims' table, each run's tables; CheckReport finds it sound, and finds
// a missing plot, a missing section and an unsettled figure shown as one
// number.
func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	r := sampleReport(t, dir)
	paths, err := r.WriteFiles(dir)
	if err != nil || len(paths) != 2 {
		t.Fatalf("%v, %v", paths, err)
	}
	if r.Failed != 1 {
		t.Errorf("failed %d, want 1", r.Failed)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## SSAM", "## AM-II", "## DVCM", "## GRIM", "**Failed**: lab: no veth", "**Not run**",
		"| round trip | µs | 20.0 | 4.90 [4.70–5.10] | 0.245 [0.235–0.255] |\n",
		"| ↳ peer: raw AF_XDP | µs | | 4.40 [4.20–4.50] | 1.12 [1.11–1.13] |\n",
		"| ↳ peer: UCX | | | " + ucxNotInstalled + " | — |\n",
		"| trap | ns | " + numbersLost + " | unsettled: 5084–12000 (3 runs) | — |\n",
		"**Unsettled figures** (1, runs more than 2x apart):\n\n- ssam: trap (unsettled: 5084–12000 (3 runs))\n\n",
		"\n## Reproduced?\n", "| SSAM | Active Messages round trips are faster than the kernel's sockets |",
		"| SSAM | Cost tables, round trip and bulk bandwidth (`ssam`) | ok | 3 | 1.0 |",
		"The experiment's tables, run 1 of 3", "#### SSAM's tables", "##### 1. Traps", "The experiment's tables, run 3 of 3",
		"![overcommit.png](overcommit.png)", "Each point of the plots is the median of the 3 runs", "**1 experiment(s) failed**"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if err := CheckReport(dir); err != nil {
		t.Errorf("CheckReport: %v", err)
	}
	os.Remove(filepath.Join(dir, "overcommit.svg"))
	r.Sections = r.Sections[:3]
	if _, err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	err = CheckReport(dir)
	if err == nil || !strings.Contains(err.Error(), "overcommit.svg not written") || !strings.Contains(err.Error(), "no section GRIM") {
		t.Errorf("CheckReport: %v, want the missing plot and section", err)
	}
	tampered := strings.Replace(string(md), "unsettled: 5084–12000 (3 runs) |", "5200 |", 1)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckReport(dir); err == nil || !strings.Contains(err.Error(), `figure "trap": report.md shows`) {
		t.Errorf("CheckReport: %v, want the unsettled figure shown as one number", err)
	}
}

// TestUnsettledSummary: the summary lists each unsettled figure and
// peer's value once, though a peer stands beside several figures.
func TestUnsettledSummary(t *testing.T) {
	var runs [][]Figure
	for _, v := range [][2]float64{{1, 10}, {1.1, 30}, {1.2, 12}} {
		tcp := peer("kernel TCP", v[1])
		runs = append(runs, []Figure{noteFig("short", "MB/s", "words", v[0], tcp), noteFig("bulk", "MB/s", "words", 3*v[1], tcp)})
	}
	r := &Report{Sections: []*Section{NewSection(PaperAMII)}}
	r.Sections[0].Add(NewExperiment("amii")).Figures = mergeFigures(runs)
	var b strings.Builder
	r.unsettledSummary(&b)
	want := "**Unsettled figures** (2, runs more than 2x apart):\n\n- amii: bulk (unsettled: 30.0–90.0 (3 runs))\n- amii: short, peer kernel TCP (unsettled: 10.0–30.0 (3 runs))\n\n"
	if b.String() != want {
		t.Errorf("summary %q, want %q", b.String(), want)
	}
}

// TestFinite: figures that JSON cannot carry become 0, the rest keep four
// significant digits; a ratio to a paper figure of 0 or a peer of 0 is
// absent.
func TestFinite(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, 0}, {1.23456, 1.235}, {123456, 123500}, {0.000123456, 0.0001235}, {-2.5, -2.5},
		{1.0000592524547175e+08, 1e8}, {math.NaN(), 0}, {math.Inf(1), 0}} {
		if got := finite(tc.in); got != tc.want || finite(got) != got {
			t.Errorf("finite(%g) = %g, want %g, which rounds to itself", tc.in, got, tc.want)
		}
	}
	f := paperFig("x", "µs", 0, 1, peer("zero", 0))
	b, err := json.Marshal(f)
	if err != nil || f.VsPaper != nil || f.Peers[0].Ratio != nil || strings.Contains(string(b), "ratio") || strings.Contains(string(b), "vs_paper") {
		t.Errorf("%s: %v, want no ratios", b, err)
	}
}

// TestUCXFinal parses ucx_perftest's summary line, and refuses output
// without one.
func TestUCXFinal(t *testing.T) {
	out := "+---+\n|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |\n" +
		"Final:                 10000      8.233     9.304     9.304        0.82       0.82      107482      107482\n| Message size: 8 |\n"
	v, err := ucxFinal(out)
	if err != nil || len(v) != 8 || v[0] != 10000 || v[1] != 8.233 || v[5] != 0.82 {
		t.Fatalf("%v, %v", v, err)
	}
	if _, err := ucxFinal("connection refused\n"); err == nil {
		t.Error("no Final line: no error")
	}
	if _, err := ucxFinal("Final: 1 2 x 4 5 6 7 8\n"); err == nil {
		t.Error("a word in Final: no error")
	}
}

// TestUCX runs both UCX peers between the two ends of a veth pair, and
// reports the tool as not installed where it is missing.
func TestUCX(t *testing.T) {
	testenv.RequireCommand(t, ucxPerftest)
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	lat, err := runUCX(a, b, p.B.Addr.Addr(), "ucp_am_lat", 8, 1000)
	if err != nil || lat.Missing != "" || lat.RTT <= 0 {
		t.Fatalf("latency: %+v, %v", lat, err)
	}
	bw, err := runUCX(a, b, p.B.Addr.Addr(), "ucp_am_bw", 64<<10, 200)
	if err != nil || bw.Missing != "" || bw.MBPerS <= 0 {
		t.Fatalf("bandwidth: %+v, %v", bw, err)
	}
	if pr := bw.Peer(); pr.Value.Median != finite(bw.MBPerS) || pr.Missing != "" {
		t.Errorf("peer %+v", pr)
	}
	t.Setenv("PATH", t.TempDir())
	u, err := runUCX(a, b, p.B.Addr.Addr(), "ucp_am_lat", 8, 1000)
	if err != nil || u.Missing != ucxNotInstalled || u.Peer().Missing == "" {
		t.Errorf("without the tool: %+v, %v", u, err)
	}
}

// TestIncastFiguresPartial: the figures of an incast run that measured
// the coordinated point but not the uncoordinated one name no
// "no coordination" peer rather than one of zero.
func TestIncastFiguresPartial(t *testing.T) {
	r := &incastResult{Points: []incastPointRow{{Config: "on", Senders: 3, Size: 16384, Ratio: 0.9}}}
	figs := r.Figures()
	if len(figs) == 0 {
		t.Fatal("no figures")
	}
	for _, f := range figs {
		for _, p := range f.Peers {
			if p.Name == "no coordination" {
				t.Errorf("%s: peer %+v of a point not measured", f.Name, p)
			}
		}
	}
}

// The report's header says what the labs' devices are and how xam used
// them: doctor's facts and the sockets' AF_XDP mode.
func TestSetupDescribesDevices(t *testing.T) {
	s := Setup{Kernel: "6.18.0", CPUs: 2, Lab: "veth labs",
		Device: &netdev.Device{Driver: "veth", XDPMode: "generic", XSKMode: "copy", MultiBuffer: true, RxMetadata: []string{"timestamp", "hash"}},
		XSK:    &datapath.XSKUse{Policy: "auto", Mode: "copy", Why: "eth0's driver (veth) has no AF_XDP zero-copy"}}
	want := "veth labs, Linux 6.18.0, 2 CPUs, devices veth (XDP generic, AF_XDP copy, multi-buffer frames, XDP receive metadata: timestamp hash), " +
		"AF_XDP in copy mode (--zerocopy auto; eth0's driver (veth) has no AF_XDP zero-copy)"
	if got := s.describe(); got != want {
		t.Errorf("describe:\n got %s\nwant %s", got, want)
	}
}
