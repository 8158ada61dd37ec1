package bench

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/grim/storage"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// grimConfig configures runGRIM, GRIM's figures beside the paper's and
// today's peers.
type grimConfig struct {
	Count int   // round trips per latency point (default 5000)
	Bulk  int64 // bytes per bandwidth point (default 16 MiB)
	// Light: fewer rounds of the compared round trips, one bandwidth run
	// per point and shorter bursts (`xam bench all --quick`, whose runs
	// of the experiment give the spread).
	Light      bool
	RunOptions // the XDP attach mode, where progress goes, what stops the run
}

// light returns quick where cfg is light, full otherwise.
func (cfg grimConfig) light(quick, full int) int {
	if cfg.Light {
		return quick
	}
	return full
}

// GRIMResult's tables. Each ratio is to a row of the same table, measured
// in the same run.
type grimBenchResult struct {
	// Peers: round trips of a short message, GRIM (inline and firmware
	// mode) beside raw AF_XDP, AM-II inline and kernel TCP; Ratio is p50
	// over GRIM inline's.
	Peers []enginePing `json:"peers"`
	// Channels: GRIM inline round trips with each endpoint owning n
	// logical channels, the pings spread over them; Ratio over 1 channel.
	Channels []grimChannelsRow `json:"channels"`
	// Gap: a burst of n short messages on one channel; microseconds per
	// message from the first send to the last injected and to the last
	// answered.
	Gap []grimGap `json:"gap"`
	// Bandwidth: bulk messages of each size, cut-through and
	// store-and-forward, beside kernel TCP writes of 48 KB.
	Bandwidth []grimBandwidthRow `json:"bandwidth"`
	TCP48K    *BulkResult        `json:"tcp_48k"`
	// Storage: firmware mode, a short round trip to host B's application
	// beside reading one block from the storage endpoint on host B.
	Storage []enginePing `json:"storage"`
	// Injection: the cost of one Channel.Short call (the descriptor
	// written into the channel's ring) beside SSAM's send trap.
	Injection []costRow `json:"injection"`
	// Memory: receive memory per peer at full bandwidth.
	Memory      []grimMemoryRow `json:"memory"`
	Window      int             `json:"bandwidth_window"`
	Interrupted bool            `json:"interrupted,omitempty"`
}

// grimChannelsRow is a row of grimBenchResult.Channels, in microseconds.
type grimChannelsRow struct {
	Channels int     `json:"channels"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	Ratio    float64 `json:"p50_ratio"`
}

// grimGap is a row of grimBenchResult.Gap: microseconds per message until the
// last Short call returned (the sender's gap: the channel's ring absorbs
// a burst, then the sender waits on the engine), and until the last
// answer came back.
type grimGap struct {
	Burst    int     `json:"burst"`
	Injected float64 `json:"injected_us_per_message"`
	Answered float64 `json:"answered_us_per_message"`
}

// grimBandwidthRow is a row of grimBenchResult.Bandwidth, in MB/s (10^6 bytes).
type grimBandwidthRow struct {
	Size         int     `json:"size"`
	CutThrough   float64 `json:"cut_through_mb_s"`
	StoreForward float64 `json:"store_and_forward_mb_s"`
	Ratio        float64 `json:"cut_through_ratio"`
}

// grimMemoryRow is a row of grimBenchResult.Memory.
type grimMemoryRow struct {
	Scheme  string  `json:"scheme"`
	Bytes   int     `json:"bytes"`    // per peer
	MBPerS  float64 `json:"mb_per_s"` // the bandwidth it was measured at, if measured
	Comment string  `json:"comment"`
}

// grimBurstSizes and grimSizes are the gap and bandwidth points.
var (
	grimChannelCounts = []int{1, 2, 4, 8, 16}
	grimBurstSizes    = []int{1, 10, 100, 200, 1000, 2000}
	grimSizes         = []int{1 << 10, 4 << 10, 16 << 10, grim.MaxBulk}
	grimPools         = []int{grim.MaxBulk, 2 * grim.MaxBulk, 4 * grim.MaxBulk, 8 * grim.MaxBulk}
)

// grimBulkWindow is the engines' window in the bandwidth runs: a bulk
// message's chunks in flight at once.
const grimBulkWindow = 16

// runGRIM measures GRIM between a and b (addresses aAddr and bAddr for
// kernel TCP).
func runGRIM(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg grimConfig) (*grimBenchResult, error) {
	if cfg.Count == 0 {
		cfg.Count = 5000
	}
	if cfg.Bulk == 0 {
		cfg.Bulk = 16 << 20
	}
	if cfg.Count < 10 || cfg.Bulk < grim.MaxBulk {
		return nil, fmt.Errorf("grim: count %d (at least 10), bulk %d (at least %d)", cfg.Count, cfg.Bulk, grim.MaxBulk)
	}
	res := &grimBenchResult{Window: grimBulkWindow}
	step := stepper(cfg.Stop, cfg.Progress, &res.Interrupted)
	pc := PingConfig{Count: cfg.Count, Size: 16, Mode: cfg.Mode}
	var err error

	if !step("round trips beside the peers") {
		return res, nil
	}
	if res.Peers, err = grimPeers(a, b, aAddr, bAddr, pc, cfg.light(3, 10)); err != nil {
		return nil, err
	}

	if !step("latency against the number of logical channels") {
		return res, nil
	}
	if res.Channels, err = grimChannels(a, b, pc, cfg.light(2, 5)); err != nil {
		return nil, err
	}

	if !step("gap against burst size") {
		return res, nil
	}
	if res.Gap, err = grimGaps(a, b, cfg.Mode, cfg.light(500, 2000)); err != nil {
		return nil, fmt.Errorf("gap: %w", err)
	}

	if !step("bandwidth, cut-through and store-and-forward, and kernel TCP") {
		return res, nil
	}
	if res.Bandwidth, err = grimBandwidthTable(a, b, cfg); err != nil {
		return nil, err
	}
	if res.TCP48K, err = tcpStream(a, b, aAddr, bAddr, cfg.Bulk, grim.MaxBulk); err != nil {
		return nil, fmt.Errorf("kernel TCP: %w", err)
	}

	if !step("host to host and host to storage endpoint (firmware mode)") {
		return res, nil
	}
	if res.Storage, err = grimStoragePing(a, b, pc); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}

	if !step("injection overhead beside SSAM's send trap") {
		return res, nil
	}
	var ssamMem ssamMemory
	if res.Injection, ssamMem, err = grimInjectionCosts(a, b, cfg); err != nil {
		return nil, err
	}

	if !step("receive memory per peer at full bandwidth") {
		return res, nil
	}
	if res.Memory, err = grimMemory(a, b, cfg, ssamMem); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	return res, nil
}

// grimMicros returns r's median and 99th percentile round trips in
// microseconds.
func grimMicros(r *PingResult) (p50, p99 float64) {
	return float64(r.RTT.P50) / 1e3, float64(r.RTT.P99) / 1e3
}

// grimPeers measures grimBenchResult.Peers: GRIM inline, raw AF_XDP, AM-II
// inline and kernel TCP compared in interleaved rounds, then GRIM in
// firmware mode (one engine thread) on its own; each ratio is over GRIM
// inline's median.
func grimPeers(a, b datapath.Place, aAddr, bAddr netip.Addr, pc PingConfig, rounds int) ([]enginePing, error) {
	grimInline := func(c PingConfig) (*PingResult, error) {
		r, err := GRIMPing(a, b, c, 0, false, FirmwareLayout{})
		if err != nil {
			return nil, err
		}
		return &r.PingResult, nil
	}
	cmp, err := comparePaths(pc, rounds,
		pinger{"grim inline", grimInline},
		pinger{"raw", func(c PingConfig) (*PingResult, error) { return RawPing(a, b, c) }},
		pinger{"amii inline", func(c PingConfig) (*PingResult, error) {
			r, err := AMIIPing(a, b, c, 0)
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}},
		pinger{"kernel tcp", func(c PingConfig) (*PingResult, error) { return tcpPing(a, b, aAddr, bAddr, c) }})
	if err != nil {
		return nil, err
	}
	var rows []enginePing
	base, _ := grimMicros(cmp.Paths[0].PingResult)
	for _, p := range cmp.Paths {
		p50, p99 := grimMicros(p.PingResult)
		rows = append(rows, enginePing{Name: p.Name, P50: p50, P99: p99, Ratio: p50 / base})
	}
	fw, err := GRIMPing(a, b, pc, 0, true, FirmwareLayout{Shape: ShapeGroup})
	if err != nil {
		return nil, fmt.Errorf("GRIM firmware mode: %w", err)
	}
	p50, p99 := grimMicros(&fw.PingResult)
	return append(rows, enginePing{Name: "grim firmware", P50: p50, P99: p99, Ratio: p50 / base}), nil
}

// grimChannels measures grimBenchResult.Channels: GRIM inline round trips with
// each of grimChannelCounts, compared in interleaved rounds, each row's
// ratio over the first's.
func grimChannels(a, b datapath.Place, pc PingConfig, rounds int) ([]grimChannelsRow, error) {
	var paths []pinger
	for _, n := range grimChannelCounts {
		paths = append(paths, pinger{fmt.Sprintf("%d channels", n), func(c PingConfig) (*PingResult, error) {
			r, err := grimChannelPing(a, b, c, n)
			if err != nil {
				return nil, fmt.Errorf("%d channels: %w", n, err)
			}
			return &r.PingResult, nil
		}})
	}
	cmp, err := comparePaths(pc, rounds, paths...)
	if err != nil {
		return nil, err
	}
	var rows []grimChannelsRow
	for i, p := range cmp.Paths {
		p50, p99 := grimMicros(p.PingResult)
		row := grimChannelsRow{Channels: grimChannelCounts[i], P50: p50, P99: p99, Ratio: 1}
		if i > 0 {
			row.Ratio = p50 / rows[0].P50
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// grimBandwidthTable measures grimBenchResult.Bandwidth: for each of grimSizes,
// the median bandwidth cut-through and store-and-forward, and the ratio of
// the two.
func grimBandwidthTable(a, b datapath.Place, cfg grimConfig) ([]grimBandwidthRow, error) {
	var rows []grimBandwidthRow
	for _, size := range grimSizes {
		row := grimBandwidthRow{Size: size}
		for _, ct := range []bool{true, false} {
			mb, err := grimBandwidthMedian(a, b, cfg.Mode, size, cfg.Bulk, ct, 0, cfg.light(1, grimBandwidthRuns))
			if err != nil {
				return nil, fmt.Errorf("bandwidth at %d bytes: %w", size, err)
			}
			if ct {
				row.CutThrough = mb
			} else {
				row.StoreForward = mb
			}
		}
		row.Ratio = row.CutThrough / row.StoreForward
		rows = append(rows, row)
	}
	return rows, nil
}

// grimInjectionCosts measures grimBenchResult.Injection: the cost of a
// Channel.Short call beside SSAM's send trap, measured as part 1 of SSAM's
// tables does. It returns as well what the SSAM devices pin, which
// grimBenchResult.Memory sets beside GRIM's receive memory.
func grimInjectionCosts(a, b datapath.Place, cfg grimConfig) ([]costRow, ssamMemory, error) {
	traps, ssamMem, err := xdpTraps(a, b, ssamTablesConfig{Count: cfg.Count, Bulk: 1, BulkMessage: 8192, RunOptions: RunOptions{Mode: cfg.Mode}})
	if err != nil {
		return nil, ssamMemory{}, fmt.Errorf("SSAM traps: %w", err)
	}
	inj, err := grimInjection(a, b, cfg.Mode, 50*cfg.Count)
	if err != nil {
		return nil, ssamMemory{}, fmt.Errorf("injection: %w", err)
	}
	costs := []costRow{inj}
	if i := slices.IndexFunc(traps, func(c costRow) bool { return c.Op == "send" }); i >= 0 {
		costs = append(costs, traps[i])
	}
	return costs, ssamMem, nil
}

// grimChannelPing is GRIMPing inline with n channels per endpoint, the
// pings spread over A's channels.
func grimChannelPing(a, b datapath.Place, cfg PingConfig, n int) (*GRIMResult, error) {
	return grimPing(a, b, cfg, grimSetup{channels: n})
}

// grimGaps sends bursts of short messages from A to B's echo handler and
// times each from its first send to its last answer.
func grimGaps(a, b datapath.Place, mode loader.Mode, messages int) ([]grimGap, error) {
	p, err := openGRIM(a, b, mode, 0, grimSetup{})
	if err != nil {
		return nil, err
	}
	defer p.close()
	done, err := p.echo(nil)
	if err != nil {
		return nil, err
	}
	answered := 0
	err = p.a.Handle(grimAnswer, func(*grim.Token, [grim.ShortArgs]uint32, []byte) { answered++ })
	ch, cerr := p.a.Channel(0)
	err = errors.Join(err, cerr)
	var rows []grimGap
	for _, n := range grimBurstSizes {
		if err != nil {
			break
		}
		// Several bursts per size, at least messages in all, the best
		// kept: a burst is short enough for one preemption to spoil it.
		inj, all := time.Duration(1<<62), time.Duration(1<<62)
		for range max(3, messages/n) {
			answered = 0
			start := time.Now()
			for i := range n {
				if err = ch.Short(1, grimEcho, uint32(i)); err != nil {
					break
				}
			}
			inj = min(inj, time.Since(start))
			for deadline := start.Add(time.Minute); err == nil && answered < n; {
				if _, err = p.a.Poll(); err == nil && time.Now().After(deadline) {
					err = fmt.Errorf("burst of %d: %d answered after a minute", n, answered)
				}
			}
			all = min(all, time.Since(start))
		}
		per := func(d time.Duration) float64 { return roundTo(float64(d.Nanoseconds())/float64(n)/1e3, 3) }
		rows = append(rows, grimGap{Burst: n, Injected: per(inj), Answered: per(all)})
	}
	return rows, errors.Join(err, done())
}

// grimBandwidthRuns is how many times each bandwidth point is measured
// (the median is reported).
const grimBandwidthRuns = 3

// grimBandwidthMedian returns the median of times runs of grimBandwidth.
func grimBandwidthMedian(a, b datapath.Place, mode loader.Mode, size int, total int64, cutThrough bool, pool, times int) (float64, error) {
	var runs []float64
	for range times {
		mb, err := grimBandwidth(a, b, mode, size, total, cutThrough, pool)
		if err != nil {
			return 0, err
		}
		runs = append(runs, mb)
	}
	slices.Sort(runs)
	return runs[len(runs)/2], nil
}

// grimBandwidth sends total bytes from A to B in bulk messages of size,
// cut-through or store-and-forward, into a pool of pool bytes (0: the
// default), and returns MB/s from the first send to the last byte handled.
// The engines run in firmware mode, one thread for both hosts (an NI
// processor of their own, as in the paper, where cut-through lets the NI
// send while the host still writes).
func grimBandwidth(a, b datapath.Place, mode loader.Mode, size int, total int64, cutThrough bool, pool int) (float64, error) {
	p, err := openGRIM(a, b, mode, 0, grimSetup{firmware: true, fw: FirmwareLayout{Shape: ShapeGroup}, window: grimBulkWindow, cutThrough: cutThrough, pool: pool})
	if err != nil {
		return 0, err
	}
	defer p.close()
	var got atomic.Int64
	if err := p.b.Handle(grimSink, func(_ *grim.Token, _ [grim.ShortArgs]uint32, data []byte) { got.Add(int64(len(data))) }); err != nil {
		return 0, err
	}
	ch, err := p.a.Channel(0)
	if err != nil {
		return 0, err
	}
	done := serveGRIM(p.b, nil)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	n := max(1, total/int64(size))
	start := time.Now()
	for range n {
		if err = ch.Bulk(1, grimSink, data); err != nil {
			break
		}
	}
	for deadline := time.Now().Add(time.Minute); err == nil && got.Load() < n*int64(size); {
		if _, err = p.a.Poll(); err == nil && time.Now().After(deadline) {
			err = fmt.Errorf("%d of %d bytes after a minute", got.Load(), n*int64(size))
		}
	}
	el := time.Since(start)
	if err := errors.Join(err, done()); err != nil {
		return 0, err
	}
	return roundTo(float64(n*int64(size))/el.Seconds()/1e6, 1), nil
}

// grimStoragePing runs, in firmware mode with a storage endpoint on host
// B beside B's application, A's short round trips to B's application and
// A's reads of one 512-byte block from B's storage endpoint.
func grimStoragePing(a, b datapath.Place, pc PingConfig) ([]enginePing, error) {
	if err := pc.fill(); err != nil {
		return nil, err
	}
	p, err := openGRIM(a, b, pc.Mode, 0, grimSetup{firmware: true, fw: FirmwareLayout{Shape: ShapeGroup}, storage: true})
	if err != nil {
		return nil, err
	}
	defer p.close()
	dev, err := grim.Dial(p.fw[1].sock, grim.Config{Peers: p.peers, Self: 2})
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	f, err := os.CreateTemp("", "xam-grim-store-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const bs = 512
	ready := make(chan error, 1)
	var store *storage.Store
	go func() {
		var err error
		store, err = storage.New(dev, f, storage.Config{Name: "disk", BlockSize: bs, Blocks: 1024})
		ready <- err
	}()
	// A, the registry's central endpoint, runs while the store publishes.
	for published := false; !published; {
		select {
		case err := <-ready:
			if err != nil {
				return nil, err
			}
			published = true
		default:
			if _, err := p.a.Poll(); err != nil {
				return nil, err
			}
		}
	}
	stopStore := serveGRIM(dev, store.Poll)
	defer stopStore()
	stopB, err := p.echo(nil)
	if err != nil {
		return nil, err
	}
	defer stopB()
	hh, err := grimPingLoop(p.a, pc, 1, "firmware")
	if err != nil {
		return nil, err
	}
	if err := p.a.Publish(); err != nil {
		return nil, err
	}
	c, err := storage.Open(p.a, "disk", grimSink+1, bs, 10*time.Second)
	if err != nil {
		return nil, err
	}
	sr := pc.newResult("grim storage", bs)
	buf := make([]byte, bs)
	for i := range pc.Warmup + pc.Count {
		start := time.Now()
		if err := c.Read(i%1024, buf); err != nil {
			return nil, err
		}
		sr.record(i >= pc.Warmup, true, time.Since(start))
	}
	sr.finish()
	us := func(r *PingResult) (float64, float64) { return float64(r.RTT.P50) / 1e3, float64(r.RTT.P99) / 1e3 }
	h50, h99 := us(&hh.PingResult)
	s50, s99 := us(sr)
	return []enginePing{
		{Name: "host A to host B's application (short request, short reply)", P50: h50, P99: h99, Ratio: 1},
		{Name: "host A to host B's storage endpoint (read one 512-byte block)", P50: s50, P99: s99, Ratio: s50 / h50},
	}, errors.Join(stopStore(), stopB())
}

// grimInjection times Channel.Short calls on an inline endpoint: the
// calls alone, with the engine run (untimed) whenever the ring is full.
func grimInjection(a, b datapath.Place, mode loader.Mode, calls int) (costRow, error) {
	p, err := openGRIM(a, b, mode, 0, grimSetup{})
	if err != nil {
		return costRow{}, err
	}
	defer p.close()
	done := serveGRIM(p.b, nil)
	ch, err := p.a.Channel(0)
	if err != nil {
		return costRow{}, err
	}
	room := endpoint.DefaultQueueEntries - 1
	var total time.Duration
	made := 0
	for made < calls && err == nil {
		start := time.Now()
		k := 0
		for ; k < room && made+k < calls; k++ {
			if err = ch.Short(1, grimEcho, uint32(k)); err != nil {
				break
			}
		}
		total += time.Since(start)
		made += k
		// Untimed: the engine sends them and the answers come back.
		for deadline := time.Now().Add(time.Minute); err == nil && ch.Outstanding() > 0; {
			if _, err = p.a.Poll(); err == nil && time.Now().After(deadline) {
				err = errors.New("requests not answered after a minute")
			}
		}
	}
	if err := errors.Join(err, done()); err != nil {
		return costRow{}, err
	}
	return costRow{Op: "grim_short", What: "GRIM Channel.Short: one descriptor into the channel's ring (no system call)", Calls: made,
		NsPerCall: roundTo(float64(total.Nanoseconds())/float64(made), 1)}, nil
}

// grimMemory finds the smallest receive pool at which one sender's 48 KB
// bulk messages reach 90% of the bandwidth of the largest pool, and puts
// it beside AM-II's and SSAM's preallocated memory per peer.
func grimMemory(a, b datapath.Place, cfg grimConfig, ssamMem ssamMemory) ([]grimMemoryRow, error) {
	var rates []float64
	for _, pool := range grimPools {
		mb, err := grimBandwidthMedian(a, b, cfg.Mode, grim.MaxBulk, cfg.Bulk, true, pool, cfg.light(1, grimBandwidthRuns))
		if err != nil {
			return nil, fmt.Errorf("pool of %d bytes: %w", pool, err)
		}
		rates = append(rates, mb)
	}
	best := slices.Max(rates)
	i := slices.IndexFunc(rates, func(r float64) bool { return r >= 0.9*best })
	var rows []grimMemoryRow
	for j, pool := range grimPools {
		c := ""
		if j == i {
			c = "the smallest pool at 90% of the best: what one sender at full bandwidth needs"
		}
		rows = append(rows, grimMemoryRow{Scheme: fmt.Sprintf("grim pool %d KB, one sender", pool>>10), Bytes: pool, MBPerS: rates[j], Comment: c})
	}
	need := grimPools[i]
	rows = append(rows,
		grimMemoryRow{Scheme: "grim, per peer with 4 peers", Bytes: need / 4, Comment: "one pool shared by every sender: nothing reserved per peer"},
		grimMemoryRow{Scheme: "grim, per peer with 16 peers", Bytes: need / 16, Comment: ""},
		grimMemoryRow{Scheme: "am-ii bulk, per peer", Bytes: grimBulkWindow * 64 << 10, Comment: "the receiver exposes window x message per sender (AMIIBulk: 16 x 64 KB)"},
		grimMemoryRow{Scheme: "ssam, per peer", Bytes: ssamMem.PerPeerBytes, Comment: "send and receive slots of one more connection"})
	return rows, nil
}

// Markdown writes the tables.
func (r *grimBenchResult) Markdown(w io.Writer) error {
	var b strings.Builder
	if r.Interrupted {
		b.WriteString("**Interrupted**: the tables hold what was measured before the run was stopped.\n\n")
	}
	b.WriteString("## Round trips, 16-byte short message (paper: 13 us host to host)\n\n| path | p50 us | p99 us | p50 / grim inline |\n|---|---|---|---|\n")
	for _, x := range r.Peers {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", x.Name, x.P50, x.P99, x.Ratio)
	}
	b.WriteString("\n## Latency against logical channels (paper: flat for few channels; target 16 <= 1.1x 1)\n\n| channels | p50 us | p99 us | p50 / 1 channel |\n|---|---|---|---|\n")
	for _, x := range r.Channels {
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.2f |\n", x.Channels, x.P50, x.P99, x.Ratio)
	}
	b.WriteString("\n## Gap against burst size, one channel (paper: negligible under 200, 20 us steady past 1000)\n\n| burst | us per message, injected | us per message, answered |\n|---|---|---|\n")
	for _, x := range r.Gap {
		fmt.Fprintf(&b, "| %d | %.3f | %.3f |\n", x.Burst, x.Injected, x.Answered)
	}
	fmt.Fprintf(&b, "\n## Bandwidth against message size, firmware mode, engine window %d, median of 3 (paper: 106 MB/s cut-through, 74 MB/s store-and-forward)\n\n| size | cut-through MB/s | store-and-forward MB/s | ratio |\n|---|---|---|---|\n", r.Window)
	for _, x := range r.Bandwidth {
		fmt.Fprintf(&b, "| %d KB | %.1f | %.1f | %.2f |\n", x.Size>>10, x.CutThrough, x.StoreForward, x.Ratio)
	}
	if r.TCP48K != nil && len(r.Bandwidth) > 0 {
		last := r.Bandwidth[len(r.Bandwidth)-1]
		fmt.Fprintf(&b, "| kernel TCP, 48 KB writes | %.1f | | cut-through / TCP %.2f |\n", r.TCP48K.MBPerSec, last.CutThrough/r.TCP48K.MBPerSec)
	}
	b.WriteString("\n## Host to host and host to storage endpoint, firmware mode (paper: 13 us and 21 us)\n\n| path | p50 us | p99 us | p50 ratio |\n|---|---|---|---|\n")
	for _, x := range r.Storage {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", x.Name, x.P50, x.P99, x.Ratio)
	}
	b.WriteString("\n## Injection overhead (paper: ~1 us; target <= SSAM's send trap)\n\n| call | ns per call |\n|---|---|\n")
	for _, x := range r.Injection {
		fmt.Fprintf(&b, "| %s | %.1f |\n", x.What, x.NsPerCall)
	}
	b.WriteString("\n## Receive memory per peer at full bandwidth (target <= 64 KB)\n\n| scheme | bytes per peer | MB/s | |\n|---|---|---|---|\n")
	for _, x := range r.Memory {
		mb := ""
		if x.MBPerS > 0 {
			mb = fmt.Sprintf("%.1f", x.MBPerS)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", x.Scheme, x.Bytes, mb, x.Comment)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// charts gives bandwidth against message size (cut-through,
// store-and-forward), kernel TCP at 48 KB as a reference line
// (grim-bandwidth), and the gap against burst size (grim-gap).
func (r *grimBenchResult) charts() []chart {
	var sizes, ct, sf, bursts, inj, ans []float64
	for _, b := range r.Bandwidth {
		sizes = append(sizes, float64(b.Size))
		ct, sf = append(ct, b.CutThrough), append(sf, b.StoreForward)
	}
	for _, g := range r.Gap {
		bursts = append(bursts, float64(g.Burst))
		inj, ans = append(inj, g.Injected), append(ans, g.Answered)
	}
	bw := chart{name: "grim-bandwidth", title: "GRIM bandwidth against message size", xLabel: "message size (bytes, log scale)", yLabel: "MB/s",
		logX: true, xBytes: true, series: []series{xy("cut-through", sizes, ct), xy("store-and-forward", sizes, sf)}}
	if r.TCP48K != nil {
		bw.refs = []ref{{"kernel TCP, 48k writes", measure(r.TCP48K.MBPerSec)}}
	}
	return []chart{bw, {name: "grim-gap", title: "GRIM gap against burst size", xLabel: "burst (messages, log scale)", yLabel: "µs per message",
		logX: true, series: []series{xy("injected", bursts, inj), xy("answered", bursts, ans)}}}
}
