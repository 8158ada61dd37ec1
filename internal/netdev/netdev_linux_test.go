package netdev

import (
	"strings"
	"testing"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
)

func TestProbe(t *testing.T) {
	testenv.RequirePrivileged(t)
	s := Probe()
	if s.Kernel == "" || !s.XDPSockets || !s.Caps["CAP_NET_ADMIN"] || s.Memlock == "" || s.BPFJIT == "" {
		t.Errorf("Probe() = %+v", s)
	}
	if len(s.Problems) != 0 {
		t.Errorf("problems on a machine that runs xam: %v", s.Problems)
	}
}

func TestDescribeVeth(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(2))
	var d *Device
	err := p.A.Do(func() (err error) {
		d, err = Describe(p.A.Link)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Driver != "veth" || d.RxQueues != 2 || d.Index != p.A.Index || !d.Usable {
		t.Errorf("Describe(veth) = %+v", d)
	}
	if !d.FeaturesKnown {
		testenv.SkipOrFail(t, "the kernel does not answer the netdev family (needs 6.3+)")
	}
	// notes/afxdp.md: veth has basic, redirect and rx-sg, and no zero-copy.
	names := strings.Join(d.XDPFeatures, ",")
	if !strings.Contains(names, "basic") || !strings.Contains(names, "redirect") || strings.Contains(names, "xsk-zerocopy") {
		t.Errorf("veth XDP features %v", d.XDPFeatures)
	}
	if d.XDPMode != "generic" || d.XSKMode != "copy" {
		t.Errorf("recommended %s XDP, %s XSK; want generic and copy on veth", d.XDPMode, d.XSKMode)
	}
	err = p.A.Do(func() error {
		_, err := Describe("nonesuch0")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "nonesuch0") {
		t.Errorf("Describe(nonesuch0) = %v", err)
	}
}

func TestRecommend(t *testing.T) {
	for _, tc := range []struct {
		d        Device
		xdp, xsk string
	}{
		{Device{Driver: "mlx5_core", FeaturesKnown: true, XDPFeatureSet: XDPBasic | XDPRedirect | XDPXSKZeroCopy, RxQueues: 8}, "native", "zero-copy"},
		{Device{Driver: "e1000", FeaturesKnown: true, RxQueues: 1}, "generic", "copy"},
		{Device{Driver: "ixgbe", RxQueues: 4}, "generic", "copy"},
	} {
		tc.d.recommend()
		if tc.d.XDPMode != tc.xdp || tc.d.XSKMode != tc.xsk || tc.d.XDPWhy == "" {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.d.Driver, tc.d.XDPMode, tc.d.XSKMode, tc.d.XDPWhy, tc.xdp, tc.xsk)
		}
	}
	if got := strings.Join(XDPFeatureNames(XDPBasic|XDPRxSG), ","); got != "basic,rx-sg" {
		t.Errorf("XDPFeatureNames = %s", got)
	}
	if formatBytes(8<<20) != "8 MiB" || formatBytes(100) != "100 B" {
		t.Errorf("formatBytes: %s %s", formatBytes(8<<20), formatBytes(100))
	}
}

// Multi-buffer frames need kernel 6.6, and rx-sg from a driver in native
// mode; a zero-copy driver that takes one buffer a frame leaves them to
// copy mode.
func TestRecommendMultiBuffer(t *testing.T) {
	for _, tc := range []struct {
		release string
		d       Device
		want    bool
		why     string
	}{
		{"6.1.0-18-amd64", Device{Driver: "veth", RxQueues: 1}, false, "predates"},
		{"6.6.0", Device{Driver: "veth", RxQueues: 1}, true, "XDP_USE_SG"},
		{"6.18.44-fc", Device{Driver: "ixgbe", FeaturesKnown: true, XDPFeatureSet: XDPBasic | XDPRedirect, RxQueues: 4}, false, "rx-sg"},
		{"6.8.0", Device{Driver: "ice", FeaturesKnown: true, XDPFeatureSet: XDPBasic | XDPRedirect | XDPRxSG | XDPXSKZeroCopy, ZCMaxSegs: 1, RxQueues: 4}, true, "copy mode"},
		{"7.0", Device{Driver: "ice", FeaturesKnown: true, XDPFeatureSet: XDPBasic | XDPRedirect | XDPRxSG | XDPXSKZeroCopy, ZCMaxSegs: 17, RxQueues: 4}, true, "17 UMEM chunks"},
		{"garbage", Device{Driver: "veth", RxQueues: 1}, false, "predates"},
	} {
		tc.d.recommend()
		tc.d.recommendMultiBuffer(tc.release)
		if tc.d.MultiBuffer != tc.want || !strings.Contains(tc.d.MultiBufferWhy, tc.why) {
			t.Errorf("%s on %s: multi-buffer %v (%s), want %v (%s)", tc.d.Driver, tc.release, tc.d.MultiBuffer, tc.d.MultiBufferWhy, tc.want, tc.why)
		}
	}
}
