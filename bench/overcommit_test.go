package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/netnstest"
)

// TestOvercommit runs the overcommit experiment at a small scale: with
// more virtual networks than frames, the server's endpoints fault in and
// out, and every client still gets answers.
func TestOvercommit(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	r, err := runOvercommit(a, b, overcommitConfig{Resident: 2, Factors: []int{1, 4}, Duration: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + md.String())
	if len(r.Rows) != 2 {
		t.Fatalf("%d rows", len(r.Rows))
	}
	for _, x := range r.Rows {
		if x.Rate <= 0 || x.MinClient <= 0 {
			t.Errorf("%+v: a client got no answer", x)
		}
	}
	if r.Rows[1].Faults == 0 {
		t.Errorf("4x on 2 frames: no endpoint faults (%+v)", r.Rows[1])
	}
	if _, err := PlotRuns(t.TempDir(), []Reported{r}); err != nil {
		t.Error(err)
	}
}
