package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// TestAMIIPing runs the AM-II ping-pong over AF_XDP on a veth pair, with no
// loss and with 5% of the frames dropped at both hosts: every request is
// answered, each handled exactly once, and under loss the transports
// retransmit. The raw ping-pong runs on the same pair for comparison.
func TestAMIIPing(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	const count = 500
	raw, err := RawPing(a, b, PingConfig{Count: count, Size: 32})
	checkResult(t, raw, err, count)
	for _, loss := range []float64{0, 0.05} {
		r, err := AMIIPing(a, b, PingConfig{Count: count, Size: 32}, loss)
		if err != nil {
			t.Fatalf("loss %v: %v", loss, err)
		}
		checkResult(t, &r.PingResult, nil, count)
		warm := r.Sent - count
		if r.API != "amii" || r.Size != 32 || r.Delivered != r.Sent || r.Duplicates != 0 || warm < 0 {
			t.Errorf("loss %v: %+v: want every request delivered once", loss, r)
		}
		if loss > 0 && r.Retransmits == 0 {
			t.Errorf("loss %v: no retransmission", loss)
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("loss %v: %s (raw p50 %v, amii p50 %v)", loss, js, time.Duration(raw.RTT.P50), time.Duration(r.RTT.P50))
	}
	// Above 64 bytes a medium message each way; above a medium slot,
	// refused.
	r, err := AMIIPing(a, b, PingConfig{Count: 50, Size: 72}, 0)
	if err != nil || r.Size != 72 || r.Done != 50 || r.Lost != 0 || r.Delivered != r.Sent {
		t.Errorf("a 72-byte AM-II ping: %+v, %v", r, err)
	}
	if _, err := AMIIPing(a, b, PingConfig{Count: 1, Size: endpoint.MaxMedium + 1}, 0); err == nil {
		t.Errorf("a %d-byte AM-II ping was not refused", endpoint.MaxMedium+1)
	}
}
