package bench

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
)

// reportDir, when set, names the directory of a report that `xam bench
// all` wrote, for TestReportStructure to check (CI sets it).
var reportDir = flag.String("report", "", "check the structure of the report in this directory")

// TestReportStructure checks the report in -report, if given: a section
// per paper, every experiment run and ok, every figure a number, every
// plot written. It checks no speed.
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
	for _, s := range r.Sections {
		if !strings.Contains(string(md), "\n## "+s.Paper+"\n") {
			t.Errorf("report.md has no section %s", s.Paper)
		}
		for _, e := range s.Experiments {
			if e.Status != "ok" {
				t.Errorf("%s: %s %s", e.Name, e.Status, e.Error)
			}
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
}

// sampleReport is a report of two experiments, one measured and one
// failed, with a plot written into dir.
func sampleReport(t *testing.T, dir string) *Report {
	t.Helper()
	r := &Report{Command: "xam bench all --quick", Started: time.Unix(1e9, 0), Seconds: 42, Quick: true, Setup: Setup{CPUs: 2}}
	for _, s := range []Section{PaperSSAMSection, PaperAMII, PaperDVCM, PaperGRIM} {
		r.Sections = append(r.Sections, NewSection(s))
	}
	ok := r.Sections[0].Add(NewExperiment("ssam"))
	ok.Figures = []Figure{
		paperFig("round trip", "µs", 20, 4.9, peer("raw AF_XDP", 4.4), Peer{Name: "UCX", Missing: ucxNotInstalled}),
		noteFig("trap", "ns", numbersLost, 5084),
	}
	res := &overcommitResult{Resident: 2, Rows: []overcommitRow{{Factor: 1, Endpoints: 2, Rate: 100, PerClient: 50}, {Factor: 4, Endpoints: 8, Rate: 80, PerClient: 10}}}
	paths, err := res.Plot(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		ok.Plots = append(ok.Plots, filepath.Base(p))
	}
	ok.Details = "# SSAM's tables\n\n## 1. Traps\n"
	ok.Finish(time.Second, false, nil)
	r.Sections[1].Add(NewExperiment("logp")).Finish(time.Second, false, errors.New("lab: no veth"))
	r.Sections[2].Add(NewExperiment("incast")).Finish(0, true, nil)
	r.Sections[3].Add(NewExperiment("grim")) // not run
	return r
}

// TestReportFiles writes a report and reads it back: the Markdown has
// every section, the failure and the peers' ratios; CheckReport finds it
// sound, and finds a missing plot and a missing section.
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
		"| round trip | µs | 20.0 | 4.90 | 0.24 | raw AF_XDP 4.40: 1.11; UCX: not installed", "| trap | ns | " + numbersLost + " | 5084 | — |  |", "#### SSAM's tables", "##### 1. Traps",
		"![overcommit.png](overcommit.png)", "**1 experiment(s) failed**"} {
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
}

// TestFinite: figures that JSON cannot carry become 0, the rest keep four
// significant digits; a ratio to a paper figure of 0 or a peer of 0 is
// absent.
func TestFinite(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, 0}, {1.23456, 1.235}, {123456, 123500}, {0.000123456, 0.0001235}, {-2.5, -2.5}} {
		if got := finite(tc.in); got != tc.want {
			t.Errorf("finite(%g) = %g, want %g", tc.in, got, tc.want)
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
	if pr := bw.Peer(); pr.Value != bw.MBPerS || pr.Missing != "" {
		t.Errorf("peer %+v", pr)
	}
	t.Setenv("PATH", t.TempDir())
	u, err := runUCX(a, b, p.B.Addr.Addr(), "ucp_am_lat", 8, 1000)
	if err != nil || u.Missing != ucxNotInstalled || u.Peer().Missing == "" {
		t.Errorf("without the tool: %+v, %v", u, err)
	}
}

// TestPlotNothingMeasured: an interrupted run's results, with nothing
// measured, draw no plot and return no error, whatever the experiment.
func TestPlotNothingMeasured(t *testing.T) {
	dir := t.TempDir()
	for name, r := range map[string]interface {
		Plot(string) ([]string, error)
	}{
		"ssam": &ssamTablesResult{}, "logp": &logpResult{}, "amii": &amiiBandwidthResult{}, "permutations": &permutationsResult{},
		"overcommit": &overcommitResult{}, "incast": &incastResult{}, "grim": &grimBenchResult{},
	} {
		if paths, err := r.Plot(dir); len(paths) != 0 || err != nil {
			t.Errorf("%s: %v, %v; want nothing", name, paths, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("wrote %d files", len(ents))
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
