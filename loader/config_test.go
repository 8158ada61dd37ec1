package loader

import (
	"math"
	"net"
	"strings"
	"testing"
)

// Tests that need no privileges: configuration checks and conversions.

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.EtherType != DefaultEtherType || c.MaxQueues != DefaultMaxQueues || c.MaxCircuits != DefaultMaxCircuits {
		t.Errorf("defaults: %+v", c)
	}
	if f := c.flags(); f != 0 {
		t.Errorf("flags of the zero Config: %#x", f)
	}
	c = Config{DstMAC: macB, SkipFrameCheck: true, HECCells: 1, DropOnHEC: true, Admission: true, NNI: true}
	if f := c.flags(); f != flagDstMAC|flagNoFrameCheck|flagDropOnHEC|flagAdmission|flagNNI {
		t.Errorf("flags of %+v: %#x", c, f)
	}
}

func TestConfigRejected(t *testing.T) {
	bad := map[string]Config{
		"802.3 length":       {EtherType: 1500},
		"short MAC":          {DstMAC: net.HardwareAddr{1, 2, 3}},
		"EUI-64":             {DstMAC: net.HardwareAddr{1, 2, 3, 4, 5, 6, 7, 8}},
		"negative HECCells":  {HECCells: -1},
		"HECCells too large": {HECCells: MaxScanCells + 1},
		"DropOnHEC alone":    {DropOnHEC: true},
		"NNI alone":          {NNI: true},
		"negative queues":    {MaxQueues: -1},
		"too many queues":    {MaxQueues: 1<<16 + 1},
		"negative circuits":  {MaxCircuits: -5},
	}
	for name, c := range bad {
		if _, err := Load(c); err == nil || !strings.HasPrefix(err.Error(), "loader: ") {
			t.Errorf("%s: Load(%+v) = %v, want a loader error", name, c, err)
		}
	}
}

func TestThreshold(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want uint64
	}{{0, 0}, {1, 1 << 32}, {0.5, 1 << 31}, {0.1, 429496730}} {
		got, err := threshold("rate", c.rate)
		if err != nil || got != c.want {
			t.Errorf("threshold(%v) = %d, %v; want %d", c.rate, got, err, c.want)
		}
	}
	for _, r := range []float64{-1e-9, 1 + 1e-9, math.NaN(), math.Inf(-1)} {
		if _, err := threshold("rate", r); err == nil {
			t.Errorf("threshold(%v) accepted", r)
		}
	}
}

func TestModeNames(t *testing.T) {
	for _, m := range []Mode{ModeAuto, ModeGeneric, ModeNative} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	for s, want := range map[string]Mode{"": ModeAuto, "skb": ModeGeneric, "driver": ModeNative, "drv": ModeNative} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseMode("offload"); err == nil {
		t.Error(`ParseMode("offload") accepted`)
	}
	if s := Mode(7).String(); s != "Mode(7)" {
		t.Errorf("Mode(7).String() = %q", s)
	}
	if s := ActionRedirect.String(); s != "XDP_REDIRECT" {
		t.Errorf("ActionRedirect.String() = %q", s)
	}
}
