package bench

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/xam-project/xam/datapath"
)

// amiiBandwidthConfig configures runAMIIBandwidth.
type amiiBandwidthConfig struct {
	Messages   int   // messages per short and medium point (default 200000)
	Bulk       int64 // bytes per bulk point and peer (default 32 MiB)
	RunOptions       // the XDP attach mode, where progress goes, what stops the run
}

// amiiBandwidthResult is AM-II's bandwidth against message size (the paper's
// figure: 31 MB/s node to node on Myrinet), each class of message at its
// sizes, beside raw AF_XDP frames and kernel TCP on the same link, in one
// run.
type amiiBandwidthResult struct {
	Rows        []amiiBandwidthRow `json:"rows"`
	Raw         *BulkResult        `json:"raw"`
	TCP         *BulkResult        `json:"tcp"`
	UCX         *ucxResult         `json:"ucx,omitempty"` // ucx_perftest ucp_am_bw, 64 KB, on the same lab
	Interrupted bool               `json:"interrupted,omitempty"`
}

// amiiBandwidthRow is one point: class (short, medium, bulk), bytes per
// message (a short message's arguments), messages per second, MB/s of
// payload, and the ratio to kernel TCP's goodput.
type amiiBandwidthRow struct {
	Class   string  `json:"class"`
	Size    int     `json:"size"`
	PerSec  float64 `json:"messages_per_s"`
	MBPerS  float64 `json:"mb_per_s"`
	VsTCP   float64 `json:"ratio_to_tcp"`
	Setting string  `json:"setting"`
}

// The points of runAMIIBandwidth.
var (
	amiiShortArgs   = []int{1, 2, 4, 8}
	amiiMediumSizes = []int{256, 1024, 4096, 8192}
	amiiBulkSizes   = []int{8 << 10, 16 << 10, 64 << 10}
)

// runAMIIBandwidth measures AM-II's bandwidth against message size between
// a and b (addresses aAddr and bAddr for TCP): short requests (8..64 bytes
// of arguments, window 32, coalesced), medium requests (256 B..8 KB,
// window 16) and bulk Stores (8..64 KB, window 16), with raw AF_XDP frames
// and kernel TCP (64 KB writes) beside them.
func runAMIIBandwidth(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg amiiBandwidthConfig) (*amiiBandwidthResult, error) {
	if cfg.Messages == 0 {
		cfg.Messages = 200_000
	}
	if cfg.Bulk == 0 {
		cfg.Bulk = 32 << 20
	}
	if cfg.Messages < 1 || cfg.Bulk < 64<<10 {
		return nil, fmt.Errorf("amii bandwidth: messages %d (at least 1), bulk %d (at least 64 KB)", cfg.Messages, cfg.Bulk)
	}
	res := &amiiBandwidthResult{}
	step := stepper(cfg.Stop, cfg.Progress, &res.Interrupted)
	var err error
	if !step("the peers: raw AF_XDP frames and kernel TCP") {
		return res, nil
	}
	if res.Raw, err = rawBulk(a, b, cfg.Bulk, cfg.Mode); err != nil {
		return nil, fmt.Errorf("raw: %w", err)
	}
	if res.TCP, err = tcpStream(a, b, aAddr, bAddr, cfg.Bulk, 64<<10); err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	add := func(class string, size int, perSec float64, setting string) {
		mb := perSec * float64(size) / 1e6
		res.Rows = append(res.Rows, amiiBandwidthRow{Class: class, Size: size, PerSec: perSec, MBPerS: mb,
			VsTCP: mb / res.TCP.MBPerSec, Setting: setting})
	}
	if !step("short messages") {
		return res, nil
	}
	for _, n := range amiiShortArgs {
		r, err := amiiPlainRate(a, b, cfg.Messages, n, 32, true, cfg.Mode)
		if err != nil {
			return nil, fmt.Errorf("short, %d arguments: %w", n, err)
		}
		add("short", 8*n, r.PerSec, "window 32, coalesced")
	}
	if !step("medium messages") {
		return res, nil
	}
	for _, size := range amiiMediumSizes {
		r, err := amiiMedium(a, b, cfg.Messages/4, size, 16, cfg.Mode)
		if err != nil {
			return nil, fmt.Errorf("medium, %d bytes: %w", size, err)
		}
		add("medium", size, r.PerSec, "window 16")
	}
	if !step("bulk Stores") {
		return res, nil
	}
	for _, size := range amiiBulkSizes {
		r, err := amiiBulk(a, b, cfg.Bulk, size, 16, cfg.Mode)
		if err != nil {
			return nil, fmt.Errorf("bulk, %d bytes: %w", size, err)
		}
		add("bulk", size, r.MBPerSec*1e6/float64(size), "window 16")
	}
	return res, nil
}

// Markdown writes the table.
func (r *amiiBandwidthResult) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("## AM-II bandwidth against message size (paper: 31 MB/s node to node, Myrinet)\n\n")
	if r.Interrupted {
		b.WriteString("**Interrupted**: the table holds what was measured before the run was stopped.\n\n")
	}
	b.WriteString("| class | bytes | msgs/s | MB/s | / kernel TCP | setting |\n|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.1f | %.3f | %s |\n", x.Class, x.Size, x.PerSec, x.MBPerS, x.VsTCP, x.Setting)
	}
	if r.Raw != nil {
		fmt.Fprintf(&b, "| raw AF_XDP frames | %d | | %.1f | %.3f | the data path's ceiling |\n", r.Raw.Message, r.Raw.MBPerSec, r.Raw.MBPerSec/r.TCP.MBPerSec)
	}
	if r.TCP != nil {
		fmt.Fprintf(&b, "| kernel TCP | %d | | %.1f | 1 | 64 KB writes |\n", r.TCP.Message, r.TCP.MBPerSec)
	}
	if u := r.UCX; u != nil && u.Missing != "" {
		fmt.Fprintf(&b, "| UCX AM over TCP | %d | | | | %s |\n", u.Size, u.Missing)
	} else if u != nil && r.TCP != nil {
		fmt.Fprintf(&b, "| UCX AM over TCP | %d | | %.1f | %.3f | ucx_perftest -t %s, UCX_TLS=tcp |\n", u.Size, u.MBPerS, u.MBPerS/r.TCP.MBPerSec, u.Test)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
