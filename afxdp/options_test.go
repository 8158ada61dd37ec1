package afxdp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
)

// TestOpenOptions checks that Open refuses invalid options before it
// touches the kernel (no privileges needed).
func TestOpenOptions(t *testing.T) {
	for _, c := range []struct {
		opts  afxdp.Options
		words string
	}{
		{afxdp.Options{FrameSize: 1024}, "frame size 1024"},
		{afxdp.Options{FrameSize: 3000}, "frame size 3000"},
		{afxdp.Options{RxSize: 1000}, "RX ring size 1000: must be a power of two"},
		{afxdp.Options{FillSize: 3}, "fill ring size 3"},
		{afxdp.Options{TxSize: -4}, "TX ring size -4"},
		{afxdp.Options{CompletionSize: 1 << 20}, "completion ring size"},
		{afxdp.Options{TxSize: 1024, CompletionSize: 512}, "completion ring (512) smaller than TX ring (1024)"},
		{afxdp.Options{RxSize: 512, FillSize: 1024}, "RX ring (512) smaller than fill ring (1024)"},
		{afxdp.Options{TxSize: 64, BatchSize: 128}, "batch size 128"},
		{afxdp.Options{TxSize: 64, BatchSize: 64, TxBudget: 128}, "TX budget 128"},
		{afxdp.Options{Queue: -1}, "queue -1"},
		{afxdp.Options{Headroom: 2000}, "headroom 2000"},
		{afxdp.Options{Mode: afxdp.Mode(7)}, "unknown mode 7"},
		{afxdp.Options{BusyPoll: -time.Second}, "busy-poll time"},
		{afxdp.Options{BindTimeout: -time.Second}, "bind timeout"},
	} {
		s, err := afxdp.Open(1, c.opts)
		if s != nil || !errors.Is(err, afxdp.ErrInvalidOptions) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("Open(%+v): %v; want ErrInvalidOptions saying %q", c.opts, err, c.words)
		}
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[afxdp.Mode]string{
		afxdp.ModeAuto: "auto", afxdp.ModeCopy: "copy", afxdp.ModeZeroCopy: "zero-copy", afxdp.Mode(9): "Mode(9)",
	} {
		if m.String() != want {
			t.Errorf("%d: %q, want %q", int(m), m.String(), want)
		}
	}
}

func TestCheckFrames(t *testing.T) {
	ok := make([]byte, 1514)
	if err := afxdp.CheckFrames([][]byte{ok, ok[:14], ok[:60]}, 1500); err != nil {
		t.Errorf("valid frames: %v", err)
	}
	err := afxdp.CheckFrames([][]byte{ok, make([]byte, 1515)}, 1500)
	var fse *afxdp.FrameSizeError
	if !errors.As(err, &fse) || fse.Index != 1 || fse.Len != 1515 || fse.Max != 1514 || fse.MTU != 1500 ||
		!errors.Is(err, afxdp.ErrFrameTooLarge) || errors.Is(err, afxdp.ErrFrameTooShort) {
		t.Errorf("oversize frame: %#v", err)
	}
	want := "afxdp: frame 1 is 1515 bytes, larger than the link's limit of 1514 (MTU 1500 + 14-byte Ethernet header); nothing sent"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	err = afxdp.CheckFrames([][]byte{ok[:13]}, 1500)
	if !errors.Is(err, afxdp.ErrFrameTooShort) || !strings.Contains(err.Error(), "frame 0 is 13 bytes, shorter") {
		t.Errorf("runt: %v", err)
	}
}

// TestUMEMOptions checks that NewUMEM and OpenShared refuse invalid options
// before they touch the kernel (no privileges needed).
func TestUMEMOptions(t *testing.T) {
	for _, c := range []struct {
		opts  afxdp.UMEMOptions
		words string
	}{
		{afxdp.UMEMOptions{}, "UMEM of 0 chunks"},
		{afxdp.UMEMOptions{Chunks: afxdp.MaxUMEMChunks + 1}, "UMEM of 1048577 chunks"},
		{afxdp.UMEMOptions{Chunks: 64, FrameSize: 1000}, "frame size 1000"},
		{afxdp.UMEMOptions{Chunks: 64, Headroom: -1}, "headroom -1"},
		{afxdp.UMEMOptions{Chunks: 64, Mode: afxdp.Mode(9)}, "unknown mode 9"},
	} {
		u, err := afxdp.NewUMEM(c.opts)
		if u != nil || !errors.Is(err, afxdp.ErrInvalidOptions) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("NewUMEM(%+v): %v; want ErrInvalidOptions saying %q", c.opts, err, c.words)
		}
	}
	for _, c := range []struct {
		queues []int
		opts   afxdp.Options
		words  string
	}{
		{nil, afxdp.Options{}, "no queues"},
		{[]int{0, 1}, afxdp.Options{Queue: 1}, "Options.Queue 1"},
		{[]int{0, 1}, afxdp.Options{FillSize: 3}, "fill ring size 3"},
	} {
		socks, err := afxdp.OpenShared(1, c.queues, c.opts)
		if socks != nil || !errors.Is(err, afxdp.ErrInvalidOptions) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("OpenShared(%v, %+v): %v; want ErrInvalidOptions saying %q", c.queues, c.opts, err, c.words)
		}
	}
}
