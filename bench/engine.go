package bench

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
)

// authWindow is the window of the authenticated AM-II stream runEngine
// measures beside the same stream without a key.
const authWindow = 32

// authRounds is the rounds in which runEngine alternates the plain and the
// authenticated streams.
const authRounds = 5

// medianOf returns the median of xs (the mean of the middle two of an even
// number), 0 for none.
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// engineConfig configures runEngine, the firmware engine's figures beside
// their peers: message rates, round trips and bulk goodput.
type engineConfig struct {
	Count      int   // round trips per path (default 20000); messages per rate: 50 times as many
	Bulk       int64 // bytes of each bulk run (default 64 MiB)
	RunOptions       // the XDP attach mode, where progress goes, what stops the run
}

// engineResult is what runEngine measured. Each table's rows were
// measured in one run on one link, and each ratio is to a row of the same
// table.
type engineResult struct {
	// Rates: raw one-cell frames (afxdp's socket, then asavie/xdp's, the
	// Go-library peer), SSAM's batched single-cell messages and AM-II's
	// streams of two-argument requests (coalesced, windows 8, 32 and 128);
	// Ratio is to the raw frame rate.
	Rates []engineRate `json:"rates"`
	// Pings: raw, SSAM, AM-II (inline engines), raw on asavie/xdp's socket
	// and AM-II in firmware mode (as deployed, an `xam fw` process per
	// host, given RunOptions.Exe; and one engine thread for both hosts) in
	// alternation (Compare); Ratio is the p50 over SSAM's, and for
	// firmware mode over inline AM-II's.
	Pings []enginePing `json:"pings"`
	// Bulk: on links of each of BulkMTUs, raw AF_XDP frames of the MTU,
	// kernel TCP, SSAM's 8 KB messages, AM-II's 64 KB Stores and GRIM's
	// 48 KB bulk messages, cut-through and store-and-forward. Ratio is to
	// TCP's goodput on the same link.
	Bulk []engineBulk `json:"bulk"`
	// BulkMTUs are the MTUs of the bulk links: Ethernet's, a jumbo
	// frame's and the largest xam's multi-buffer frames carry.
	BulkMTUs []int `json:"bulk_mtus"`
	// AuthRateRatio and AuthPingRatio are the authenticated AM-II
	// stream's rate over the same stream's without a key, and the
	// authenticated inline round trip's p50 over the plain one's, both
	// measured in this run (nicfw.VNet.Key).
	AuthRateRatio float64 `json:"auth_rate_ratio,omitempty"`
	AuthPingRatio float64 `json:"auth_ping_ratio,omitempty"`
	// TransportAuthRateRatio and TransportAuthPingRatio are the same
	// ratios with the frames authenticated instead, by the engines'
	// transport (transport.Config.Key, nicfw.EngineConfig.Transport.Key).
	TransportAuthRateRatio float64 `json:"transport_auth_rate_ratio,omitempty"`
	TransportAuthPingRatio float64 `json:"transport_auth_ping_ratio,omitempty"`
	// Interrupted: the run was stopped (EngineConfig.Stop) before its end.
	Interrupted bool `json:"interrupted,omitempty"`
}

// engineRate is one row of engineResult.Rates.
type engineRate struct {
	*rateResult
	PerFrame float64 `json:"messages_per_frame"`
	Ratio    float64 `json:"ratio_to_raw"`
}

// enginePing is one row of engineResult.Pings, in microseconds.
type enginePing struct {
	Name  string  `json:"name"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	Ratio float64 `json:"p50_ratio"`
}

// engineBulk is one row of engineResult.Bulk.
type engineBulk struct {
	*BulkResult
	MTU         int     `json:"mtu"`
	MultiBuffer bool    `json:"multi_buffer"` // frames span several UMEM chunks
	Ratio       float64 `json:"ratio_to_tcp"`
}

// bulkLink is a link of engineResult's bulk goodputs: two hosts and
// their addresses for TCP.
type bulkLink struct {
	mtu          int
	a, b         datapath.Place
	addrA, addrB netip.Addr
}

// engineBulkMTUs are the MTUs of `xam bench engine`'s bulk links.
func engineBulkMTUs() []int { return []int{1500, 9000, datapath.MaxMTU(true)} }

// engineRates are the AM-II streams of runEngine: window, coalesced.
var engineRates = []struct {
	window   int
	coalesce bool
}{{8, true}, {32, true}, {128, true}}

// runEngine measures the rates and round trips between a and b, then the
// bulk goodputs on each of links.
func runEngine(a, b datapath.Place, links []bulkLink, cfg engineConfig) (*engineResult, error) {
	if cfg.Count == 0 {
		cfg.Count = 20000
	}
	if cfg.Bulk == 0 {
		cfg.Bulk = 64 << 20
	}
	if cfg.Count < 10 || cfg.Bulk < 1 {
		return nil, fmt.Errorf("engine: count %d (at least 10), bulk %d (at least 1)", cfg.Count, cfg.Bulk)
	}
	res := &engineResult{}
	step := stepper(cfg.Stop, cfg.Progress, &res.Interrupted)
	if !step("message rates") {
		return res, nil
	}
	keys, err := newEngineKeys()
	if err != nil {
		return nil, err
	}
	if err := res.measureRates(a, b, cfg, keys); err != nil {
		return nil, err
	}
	if !step("round trips") {
		return res, nil
	}
	if err := res.measurePings(a, b, cfg, keys); err != nil {
		return nil, err
	}
	if !step("bulk goodput") {
		return res, nil
	}
	for _, l := range links {
		if !step(fmt.Sprintf("bulk goodput at MTU %d", l.mtu)) {
			return res, nil
		}
		if err := res.measureBulk(l, cfg); err != nil {
			return nil, fmt.Errorf("MTU %d: %w", l.mtu, err)
		}
	}
	return res, nil
}

// engineKeys are the keys of the authenticated paths: a virtual
// network's (each message) and the transports' (each frame).
type engineKeys struct{ vnet, transport []byte }

func newEngineKeys() (engineKeys, error) {
	vnet, err := nicfw.NewKey()
	if err != nil {
		return engineKeys{}, err
	}
	transport, err := nicfw.NewKey()
	return engineKeys{vnet, transport}, err
}

// addRate appends r to the rates, its ratio to the raw frame rate (the
// first row, or r itself).
func (res *engineResult) addRate(r *rateResult) {
	raw := r.PerSec
	if len(res.Rates) > 0 {
		raw = res.Rates[0].PerSec
	}
	res.Rates = append(res.Rates, engineRate{rateResult: r, PerFrame: float64(r.Messages) / float64(max(r.Frames, 1)), Ratio: r.PerSec / raw})
}

// measureRates measures the message rates: raw frames on both sockets,
// SSAM's, AM-II's windows, then the authenticated streams.
func (res *engineResult) measureRates(a, b datapath.Place, cfg engineConfig, keys engineKeys) error {
	n := 50 * cfg.Count
	raw, err := rawFrameRate(a, b, n, 64, cfg.Mode)
	if err != nil {
		return fmt.Errorf("raw frame rate: %w", err)
	}
	res.addRate(raw)
	res.Rates[0].PerFrame = 1 // a message per frame by construction (Frames counts those sent, some of which a full ring drops)
	ar, err := asavieFrameRate(a, b, n, 64, cfg.Mode)
	if err != nil {
		return fmt.Errorf("asavie/xdp frame rate: %w", err)
	}
	res.addRate(ar)
	res.Rates[1].PerFrame = 1
	sr, err := ssamRate(a, b, n, 16, cfg.Mode, ssam.Config{Window: 63, Batch: 28})
	if err != nil {
		return fmt.Errorf("SSAM rate: %w", err)
	}
	res.addRate(sr)
	for _, c := range engineRates {
		r, err := amiiPlainRate(a, b, n, 2, c.window, c.coalesce, cfg.Mode)
		if err != nil {
			return fmt.Errorf("AM-II rate, window %d: %w", c.window, err)
		}
		res.addRate(r)
	}
	return res.measureAuthRates(a, b, n, cfg, keys)
}

// measureAuthRates measures the authenticated streams beside the same
// stream without, in authRounds rounds that alternate the three (the
// order turning each round), so that a shared machine's drift falls on
// all alike: each message (nicfw.VNet.Key), then each frame (the
// transport's key, one for both hosts). A ratio is the median of its
// rounds' ratios to the plain stream of the same round; a row sums its
// rounds.
func (res *engineResult) measureAuthRates(a, b datapath.Place, n int, cfg engineConfig, keys engineKeys) error {
	streams := []struct {
		keys  amiiKeys
		name  string
		ratio *float64
	}{
		{amiiKeys{}, "", nil},
		{amiiKeys{vnet: keys.vnet}, "authenticated", &res.AuthRateRatio},
		{amiiKeys{transport: keys.transport}, "transport key", &res.TransportAuthRateRatio},
	}
	sums := make([]rateResult, len(streams))
	ratios := make([][]float64, len(streams))
	for round := range authRounds {
		rs := make([]*rateResult, len(streams))
		for j := range streams {
			i := (j + round) % len(streams)
			r, err := amiiRate(a, b, max(n/authRounds, 1000), 2, authWindow, true, cfg.Mode, streams[i].keys)
			if err != nil {
				return fmt.Errorf("AM-II rate, %s: %w", cmp.Or(streams[i].name, "plain"), err)
			}
			rs[i] = r
		}
		for i, r := range rs {
			sums[i].API = r.API
			sums[i].Messages += r.Messages
			sums[i].Seconds += r.Seconds
			sums[i].Frames += r.Frames
			ratios[i] = append(ratios[i], r.PerSec/rs[0].PerSec)
		}
	}
	for i, k := range streams[1:] {
		r := &sums[i+1]
		r.API += ", " + k.name
		r.PerSec = float64(r.Messages) / r.Seconds
		*k.ratio = medianOf(ratios[i+1])
		res.addRate(r)
	}
	return nil
}

// measurePings measures the round trips in alternation: raw, SSAM, AM-II
// inline (plain and authenticated both ways), raw on asavie/xdp, AM-II and
// GRIM inline with 16-byte messages (one cell each way), and AM-II
// in firmware mode, as deployed (an `xam fw` process per host, with
// RunOptions.Exe) and in one engine thread of this process.
func (res *engineResult) measurePings(a, b datapath.Place, cfg engineConfig, keys engineKeys) error {
	pc := PingConfig{Count: cfg.Count, Size: 32, Mode: cfg.Mode}
	ping := func(f func(PingConfig) (*AMIIResult, error)) func(PingConfig) (*PingResult, error) {
		return func(c PingConfig) (*PingResult, error) {
			r, err := f(c)
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}
	}
	firmware := func(layout FirmwareLayout) pinger {
		return pinger{firmwarePing + ", " + layout.Shape.String(), ping(func(c PingConfig) (*AMIIResult, error) {
			return AMIIFirmwarePing(a, b, c, 0, layout)
		})}
	}
	paths := []pinger{
		{"raw", func(c PingConfig) (*PingResult, error) { return RawPing(a, b, c) }},
		{"ssam", func(c PingConfig) (*PingResult, error) {
			r, err := SSAMPing(a, b, c, 0, ssam.Config{})
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}},
		{"amii inline", ping(func(c PingConfig) (*AMIIResult, error) { return AMIIPing(a, b, c, 0) })},
		{"amii inline, authenticated", ping(func(c PingConfig) (*AMIIResult, error) {
			c.Key = keys.vnet
			return AMIIPing(a, b, c, 0)
		})},
		{"amii inline, transport key", ping(func(c PingConfig) (*AMIIResult, error) { return amiiPingKeyed(a, b, c, 0, keys.transport) })},
		{"raw, asavie/xdp", func(c PingConfig) (*PingResult, error) { return asaviePing(a, b, c) }},
		// Short messages that fit one cell, as SSAM's do: two arguments
		// (AM-II's compact cells), GRIM's four 32-bit integers.
		{"amii inline, 16 bytes (one cell)", ping(func(c PingConfig) (*AMIIResult, error) {
			c.Size = 16
			return AMIIPing(a, b, c, 0)
		})},
		{"grim inline, 16 bytes (one cell)", func(c PingConfig) (*PingResult, error) {
			c.Size = 16
			r, err := GRIMPing(a, b, c, 0, false, FirmwareLayout{})
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}},
	}
	if cfg.Exe != "" {
		paths = append(paths, firmware(FirmwareLayout{Shape: ShapeDaemons, Exe: cfg.Exe}))
	}
	paths = append(paths, firmware(FirmwareLayout{Shape: ShapeGroup}))
	cmpd, err := comparePaths(pc, 10, paths...)
	if err != nil {
		return err
	}
	us := func(r *PingResult) (float64, float64) { return float64(r.RTT.P50) / 1e3, float64(r.RTT.P99) / 1e3 }
	ssamP50, _ := us(cmpd.Paths[1].PingResult)
	inlineP50, _ := us(cmpd.Paths[2].PingResult)
	for _, p := range cmpd.Paths {
		p50, p99 := us(p.PingResult)
		of := ssamP50
		if strings.HasPrefix(p.Name, firmwarePing) {
			of = inlineP50
		}
		res.Pings = append(res.Pings, enginePing{Name: p.Name, P50: p50, P99: p99, Ratio: p50 / of})
	}
	res.AuthPingRatio = res.Pings[3].P50 / res.Pings[2].P50
	res.TransportAuthPingRatio = res.Pings[4].P50 / res.Pings[2].P50
	return nil
}

// firmwarePing begins the names of the firmware-mode round trips, whose
// ratio is over AM-II inline's.
const firmwarePing = "amii firmware"

// measureBulk measures bulk goodput on the bulk lab: raw frames, TCP,
// SSAM and AM-II, each as a ratio to TCP.
func (res *engineResult) measureBulk(l bulkLink, cfg engineConfig) error {
	type bulkRun struct {
		name string
		run  func() (*BulkResult, error)
	}
	grimRun := func(cutThrough bool) func() (*BulkResult, error) {
		return func() (*BulkResult, error) {
			mb, err := grimBandwidth(l.a, l.b, cfg.Mode, grim.MaxBulk, cfg.Bulk, cutThrough, 0)
			name := "grim store-and-forward"
			if cutThrough {
				name = "grim cut-through"
			}
			return &BulkResult{API: name, Bytes: cfg.Bulk, Message: grim.MaxBulk, MBPerSec: mb, Seconds: float64(cfg.Bulk) / mb / 1e6}, err
		}
	}
	var rows []*BulkResult
	for _, r := range []bulkRun{
		{"raw", func() (*BulkResult, error) { return rawBulk(l.a, l.b, cfg.Bulk, cfg.Mode) }},
		{"tcp", func() (*BulkResult, error) { return tcpStream(l.a, l.b, l.addrA, l.addrB, cfg.Bulk, 64<<10) }},
		{"ssam", func() (*BulkResult, error) { return SSAMBulk(l.a, l.b, cfg.Bulk, 8192, cfg.Mode, ssam.Config{}) }},
		{"amii", func() (*BulkResult, error) { return amiiBulk(l.a, l.b, cfg.Bulk, 64<<10, 16, cfg.Mode) }},
		{"grim cut-through", grimRun(true)},
		{"grim store-and-forward", grimRun(false)},
	} {
		br, err := r.run()
		if err != nil {
			return fmt.Errorf("%s bulk: %w", r.name, err)
		}
		rows = append(rows, br)
	}
	res.BulkMTUs = append(res.BulkMTUs, l.mtu)
	for _, r := range rows {
		res.Bulk = append(res.Bulk, engineBulk{BulkResult: r, MTU: l.mtu, MultiBuffer: datapath.MultiBuffer(l.mtu), Ratio: r.MBPerSec / rows[1].MBPerSec})
	}
	return nil
}

// Markdown writes the result as three tables.
func (r *engineResult) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("## Message rates, one sender (one-way, two-argument messages)\n\n")
	if r.Interrupted {
		b.WriteString("**Interrupted**: the tables hold what was measured before the run was stopped.\n\n")
	}
	b.WriteString("| path | M msgs/s | msgs/frame | x raw frames |\n|---|---|---|---|\n")
	for _, x := range r.Rates {
		fmt.Fprintf(&b, "| %s | %.3f | %.1f | %.2f |\n", x.API, x.PerSec/1e6, x.PerFrame, x.Ratio)
	}
	if len(r.Pings) > 0 {
		b.WriteString("\n## Round trips, 32-byte messages unless named (µs)\n\n| path | p50 | p99 | p50 ratio |\n|---|---|---|---|\n")
		for _, p := range r.Pings {
			of := "x SSAM"
			if strings.HasPrefix(p.Name, firmwarePing) {
				of = "x AM-II inline"
			}
			fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f %s |\n", p.Name, p.P50, p.P99, p.Ratio, of)
		}
		if r.AuthPingRatio > 0 {
			fmt.Fprintf(&b, "\nAuthenticated (AES-GMAC envelopes, nicfw.VNet.Key) over plain AM-II: round trip p50 %.3fx, message rate %.3fx (the median of %d alternating rounds).\n", r.AuthPingRatio, r.AuthRateRatio, authRounds)
		}
		if r.TransportAuthPingRatio > 0 {
			fmt.Fprintf(&b, "\nAuthenticated frames (AES-GMAC trailer cells, the transport's key) over plain AM-II: round trip p50 %.3fx, message rate %.3fx (the median of %d alternating rounds).\n", r.TransportAuthPingRatio, r.TransportAuthRateRatio, authRounds)
		}
		b.WriteString("\nraw, SSAM, AM-II inline, AM-II inline authenticated, AM-II inline with the transport's key, raw on asavie/xdp's socket and AM-II in firmware mode alternate (ten rounds); asavie/xdp is the Go AF_XDP library a user would otherwise pick, behind xam's XDP program. AM-II firmware mode, daemons: as deployed, an `xam fw` process per host (waiting adaptively: polling, yielding the CPU, then blocking), the applications in another process, waiting adaptively too; group: both hosts' engines in one thread of the applications' process (daemon.RunGroup), one NIC processor with two ports.\n")
	}
	if len(r.Bulk) > 0 {
		b.WriteString("\n## Bulk goodput, one sender, by link MTU\n\n| MTU | path | message | MB/s | x TCP |\n|---|---|---|---|---|\n")
		for _, x := range r.Bulk {
			mtu := fmt.Sprint(x.MTU)
			if x.MultiBuffer {
				mtu += " (multi-buffer)"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %.2f |\n", mtu, x.API, x.Message, x.MBPerSec, x.Ratio)
		}
		b.WriteString("\nEach MTU's rows ran on one link, TCP's ratio its own. raw: AF_XDP frames of the MTU, no protocol (the data path's ceiling); TCP: kernel stream with 64 KB writes (on veth it moves 64 KB segments, GSO); SSAM: 8 KB AAL5 messages; AM-II: 64 KB Stores, 16 outstanding, chunks pipelined; GRIM: 48 KB bulk messages, the engines in firmware mode in one thread.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
