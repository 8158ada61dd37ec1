package bench

import (
	"os"
	"strconv"
	"testing"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
)

// TestGRIMPing runs GRIM's ping-pong over AF_XDP on a veth pair: short
// messages inline and under 5% loss, and bulk messages in firmware mode;
// every request answered and handled once.
func TestGRIMPing(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	const count = 300
	for _, c := range []struct {
		size     int
		loss     float64
		firmware bool
	}{{16, 0, false}, {16, 0.05, false}, {3000, 0.05, true}} {
		r, err := GRIMPing(a, b, PingConfig{Count: count, Size: c.size}, c.loss, c.firmware, FirmwareLayout{})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		checkResult(t, &r.PingResult, nil, count)
		want := map[bool]string{false: "short", true: "bulk"}[c.size > 16]
		if r.API != "grim" || r.Message != want || r.Delivered != r.Sent || r.Duplicates != 0 {
			t.Errorf("%+v: %+v: want every %s request delivered once", c, r, want)
		}
		if c.loss > 0 && r.Retransmits == 0 {
			t.Errorf("%+v: no retransmission", c)
		}
	}
	if _, err := GRIMPing(a, b, PingConfig{Count: 1, Size: grim.MaxBulk + 1}, 0, false, FirmwareLayout{}); err == nil {
		t.Error("a message above grim.MaxBulk was not refused")
	}
}

// TestGRIMBandwidth moves bulk messages cut-through and
// store-and-forward at sizes that fill the payload ring, every byte
// handled. XAM_GRIM_BW=1 logs the rates of every size.
func TestGRIMBandwidth(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	sizes := []int{grim.MaxBulk}
	if v, _ := strconv.ParseBool(os.Getenv("XAM_GRIM_BW")); v {
		sizes = grimSizes
	}
	for _, size := range sizes {
		for _, ct := range []bool{true, false} {
			mb, err := grimBandwidth(a, b, loader.ModeAuto, size, 40*grim.MaxBulk, ct, 0)
			if err != nil {
				t.Fatalf("size %d, cut-through %v: %v", size, ct, err)
			}
			t.Logf("size %d, cut-through %v: %.1f MB/s", size, ct, mb)
		}
	}
}
