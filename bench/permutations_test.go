package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// starLab builds a lab of n hosts joined by a switch for the test, and
// removes it when the test ends.
func starLab(t *testing.T, n int) []datapath.Place {
	t.Helper()
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("bp%d", os.Getpid()), Hosts: n, Switch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Error(err)
		}
	})
	var places []datapath.Place
	for _, h := range l.Hosts {
		places = append(places, datapath.OnHost(h))
	}
	return places
}

// TestPermutations runs the three patterns on four hosts: every host
// moves data and completes its round trips in every pattern.
func TestPermutations(t *testing.T) {
	hosts := starLab(t, 4)
	r, err := runPermutations(hosts, permutationsConfig{Duration: 300 * time.Millisecond, RTTs: 200, Size: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pair == nil || r.Pair.PerHost <= 0 || len(r.Rows) != len(permutationPatterns) {
		t.Fatalf("pair %+v, %d rows", r.Pair, len(r.Rows))
	}
	for _, x := range r.Rows {
		if x.MinHost <= 0 || x.RTT <= 0 || x.VsPair <= 0 {
			t.Errorf("%+v: a host moved nothing, or no round trip", x)
		}
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + md.String())
	if figs := r.Figures(); len(figs) != 2*len(permutationPatterns) {
		t.Errorf("%d figures", len(figs))
	}
	paths, err := PlotRuns(t.TempDir(), []Reported{r})
	if err != nil || len(paths) != 2 {
		t.Errorf("plot: %v, %v", paths, err)
	}
}

// TestPermutationsHosts refuses an odd or too small lab.
func TestPermutationsHosts(t *testing.T) {
	for _, n := range []int{2, 5} {
		if _, err := runPermutations(make([]datapath.Place, n), permutationsConfig{}); err == nil {
			t.Errorf("%d hosts: no error", n)
		}
	}
}
