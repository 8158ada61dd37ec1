package bench

import (
	"testing"

	"github.com/xam-project/xam/internal/netnstest"
)

// TestAMIIBandwidth runs AM-II's bandwidth against message size at a small
// scale: every class and size measured, every figure positive.
func TestAMIIBandwidth(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	r, err := runAMIIBandwidth(a, b, p.A.Addr.Addr(), p.B.Addr.Addr(), amiiBandwidthConfig{Messages: 2000, Bulk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(amiiShortArgs) + len(amiiMediumSizes) + len(amiiBulkSizes); len(r.Rows) != want || r.Raw == nil || r.TCP == nil {
		t.Fatalf("%d rows, want %d; raw %v, tcp %v", len(r.Rows), want, r.Raw, r.TCP)
	}
	for _, x := range r.Rows {
		if x.PerSec <= 0 || x.MBPerS <= 0 || x.VsTCP <= 0 {
			t.Errorf("row %+v", x)
		}
	}
}
