package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/xam-project/xam/internal/netnstest"
)

// TestLogP runs the LogP measurement and the contention experiment over
// AF_XDP on a veth pair, small: every figure is measured (positive where
// it must be), the four configurations come in order, each client count
// moves messages, and the Markdown names them all.
func TestLogP(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	res, err := runLogP(a, b, logpConfig{Count: 300, Clients: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"baseline", "+reliability", "+protection", "+pipelining", "+batching"}
	if len(res.Rows) != len(want) {
		t.Fatalf("%d rows: %+v", len(res.Rows), res.Rows)
	}
	for i, r := range res.Rows {
		if r.Config != want[i] || r.Os <= 0 || r.Or <= 0 || r.G <= 0 || r.RTT <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
		// No negative latency: L is there only when RTT/2 - Os - Or is
		// positive, and figures are rounded to 0.01 µs.
		l := math.Round((r.RTT/2-r.Os-r.Or)*100) / 100
		if r.L != nil && (*r.L <= 0 || *r.L != l) || r.L == nil && l > 0 {
			t.Errorf("row %d: L %v, RTT/2 - Os - Or = %v", i, r.L, l)
		}
		for _, v := range []float64{r.Os, r.Or, r.G, r.RTT} {
			if v != math.Round(v*100)/100 {
				t.Errorf("row %d: %v is not rounded to 0.01 µs", i, v)
			}
		}
	}
	if len(res.Contention) != 3 {
		t.Fatalf("contention rows %+v, want 1..3 clients", res.Contention)
	}
	for i, c := range res.Contention {
		if c.Clients != i+1 || c.Aggregate <= 0 || c.PerClient <= 0 || c.RTT <= 0 || c.Coalesced <= 0 {
			t.Errorf("contention row %d: %+v", i, c)
		}
	}
	var out strings.Builder
	if err := res.Markdown(&out); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, s := range append(want, "| 3 |", "increment") {
		if !strings.Contains(md, s) {
			t.Errorf("the table lacks %q:\n%s", s, md)
		}
	}
}
