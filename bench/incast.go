package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
	"github.com/xam-project/xam/nicfw/transport"
)

// incastConfig configures runIncast: DVCM's experiment, several senders
// streaming messages to one receiver through a switch.
type incastConfig struct {
	Senders []int // numbers of senders (default 1, 2, 3)
	Sizes   []int // message sizes in bytes (default 1, 4, 16 and 64 KB)
	// Bytes the senders send per measurement, together (default 8 MB):
	// each of n senders sends Bytes/n, so that every point lasts about as
	// long, the single sender's too.
	Bytes int64
	// Runs: each point is measured this many times and the run of median
	// goodput reported (default 3), the spread beside it.
	Runs int
	// Latencies is the Stores timed one at a time for the cost of
	// coordination without contention (default 200).
	Latencies int
	// EarlyRelease is the coordinated run with ETR's setting (bytes of a
	// message left when its token passes on; default what the link carries
	// in 150 us at LinkRate, ten cells' payload at least).
	EarlyRelease int
	// LinkRate is the switch ports' rate in bits per second, which the
	// coordination module is told (coord.Config.LinkRate; 0: none).
	LinkRate uint64
	// PortBuffer is the bytes a switch port queues: the coordination
	// module lets messages of up to PortBuffer/hosts bytes bypass it (one
	// from every host fits). 0: the module's default threshold.
	PortBuffer int
	RunOptions // the XDP attach mode, where progress goes, what stops the run
	// Drops, if set, returns the frames the switch has dropped on its port
	// toward the receiver so far (its tbf's counter).
	Drops func() (uint64, error)
}

// incastPointRow is one measurement: a configuration, a number of senders and
// a message size.
type incastPointRow struct {
	Config      string  `json:"config"` // off, on, on+etr, tcp
	Senders     int     `json:"senders"`
	Size        int     `json:"message_bytes"`
	Messages    int     `json:"messages"`
	Seconds     float64 `json:"seconds"`
	Mbps        float64 `json:"goodput_mbps"` // aggregate goodput at the receiver
	Drops       uint64  `json:"switch_drops"` // frames the switch dropped toward the receiver
	Retransmits uint64  `json:"retransmits"`  // the senders' transports' (TCP: not counted)
	Handoffs    float64 `json:"token_handoffs_per_message,omitempty"`
	// Ratio: goodput over the best single sender's at this size (of every
	// configuration: what one sender gets through the port).
	Ratio float64 `json:"ratio_to_one_sender"`
	// Runs measured; the lowest and highest goodput of them.
	Runs    int     `json:"runs"`
	MinMbps float64 `json:"min_goodput_mbps"`
	MaxMbps float64 `json:"max_goodput_mbps"`
}

// incastResult is what runIncast measured.
type incastResult struct {
	// PortRate and PortBuffer are the switch ports' shaping, when the
	// caller says (bits per second, bytes queued).
	PortRate   uint64           `json:"port_rate_bps,omitempty"`
	PortBuffer int              `json:"port_buffer_bytes,omitempty"`
	Points     []incastPointRow `json:"points"`
	// Latency: what coordination costs a message without contention (two
	// senders, the largest size).
	Latency     []incastLatencyRow `json:"latency,omitempty"`
	Interrupted bool               `json:"interrupted,omitempty"`
}

// incastConfigs are the AM-II configurations of the experiment.
var incastConfigs = []string{"off", "on", "on+etr"}

// runIncast measures, for every number of senders and message size, the
// aggregate goodput of senders (the first hosts) streaming AM-II Stores to
// receiver, with sender coordination off, on and on with Early Token
// Release, and of as many kernel TCP streams between the same hosts
// (addrs: the hosts' addresses, receiver's included). The hosts are to be
// joined by a switch whose ports are shaped, so that the switch, not the
// processors, is the bottleneck.
func runIncast(senders []datapath.Place, receiver datapath.Place, addrs []netip.Addr, rxAddr netip.Addr, cfg incastConfig) (*incastResult, error) {
	if len(cfg.Senders) == 0 {
		cfg.Senders = []int{1, 2, 3}
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10}
	}
	if cfg.Bytes == 0 {
		cfg.Bytes = 8 << 20
	}
	if cfg.Runs == 0 {
		cfg.Runs = 3
	}
	if cfg.EarlyRelease == 0 {
		// As DVCM chose it: what the link carries in a token's passing
		// time (about 150 us between two engines here), ten cells at least.
		cfg.EarlyRelease = max(10*48, int(cfg.LinkRate/8*150/1_000_000))
	}
	for _, n := range cfg.Senders {
		if n < 1 || n > len(senders) {
			return nil, fmt.Errorf("incast: %d senders, the lab has %d", n, len(senders))
		}
	}
	for _, s := range cfg.Sizes {
		if s < 1 || s > 256<<10 {
			return nil, fmt.Errorf("incast: message size %d out of range [1, 256 KB]", s)
		}
	}
	res := &incastResult{}
	if len(senders) >= 2 {
		if cfg.Progress != nil {
			cfg.Progress("the cost of coordination without contention")
		}
		var err error
		if res.Latency, err = runIncastLatency(senders[:2], receiver, slices.Max(cfg.Sizes), cmp.Or(cfg.Latencies, 200), cfg); err != nil {
			return nil, err
		}
	}
	for _, size := range cfg.Sizes {
		first := len(res.Points)
		for _, n := range cfg.Senders {
			for _, c := range append(incastConfigs, "tcp") {
				if cfg.Stop != nil && cfg.Stop.Load() {
					res.Interrupted = true
					ratios(res.Points[first:])
					return res, nil
				}
				if cfg.Progress != nil {
					cfg.Progress(fmt.Sprintf("%d senders, %d-byte messages, %s", n, size, c))
				}
				p, err := incastPoint(senders, addrs, receiver, rxAddr, c, n, size, cfg)
				if err != nil {
					return nil, fmt.Errorf("incast %s, %d senders, %d bytes: %w", c, n, size, err)
				}
				res.Points = append(res.Points, *p)
			}
		}
		ratios(res.Points[first:])
	}
	return res, nil
}

// incastPoint measures configuration c with n senders and messages of
// size bytes cfg.Runs times and returns the run of median goodput, with
// the spread of all.
func incastPoint(senders []datapath.Place, addrs []netip.Addr, rx datapath.Place, rxAddr netip.Addr, c string, n, size int, cfg incastConfig) (*incastPointRow, error) {
	each := max(int64(size), cfg.Bytes/int64(n))
	var runs []*incastPointRow
	for range cfg.Runs {
		var before uint64
		if cfg.Drops != nil {
			var err error
			if before, err = cfg.Drops(); err != nil {
				return nil, err
			}
		}
		var p *incastPointRow
		var err error
		if c == "tcp" {
			p, err = incastTCP(senders[:n], addrs[:n], rx, rxAddr, size, each)
		} else {
			p, err = incastAMII(senders[:n], rx, c, size, each, cfg)
		}
		if err != nil {
			return nil, err
		}
		if cfg.Drops != nil {
			after, err := cfg.Drops()
			if err != nil {
				return nil, err
			}
			p.Drops = after - before
		}
		runs = append(runs, p)
	}
	slices.SortFunc(runs, func(a, b *incastPointRow) int { return cmp.Compare(a.Mbps, b.Mbps) })
	p := runs[len(runs)/2]
	p.Runs, p.MinMbps, p.MaxMbps = len(runs), runs[0].Mbps, runs[len(runs)-1].Mbps
	return p, nil
}

// ratios sets the points' (one message size's) ratios to the best single
// sender's goodput among them.
func ratios(points []incastPointRow) {
	best := 0.0
	for _, p := range points {
		if p.Senders == 1 {
			best = max(best, p.Mbps)
		}
	}
	for i := range points {
		if best > 0 {
			points[i].Ratio = points[i].Mbps / best
		}
	}
}

// openIncast opens the hosts of an incast measurement: an inline engine
// per host (with the coordination module on the senders unless config is
// "off") and an AM-II endpoint with window credits whose staging area
// holds 2*window messages of size bytes; the receiver, last, names every
// sender. Close the hosts with closeAll, also on error.
func openIncast(senders []datapath.Place, rx datapath.Place, config string, size, window int, cfg incastConfig) ([]*amiiHost, []*coord.Module, error) {
	n := len(senders)
	all := append(append([]datapath.Place(nil), senders...), rx)
	var mods []*coord.Module
	hosts := make([]*amiiHost, 0, len(all))
	rxID := nicfw.HostID(len(all))
	for i, p := range all {
		id := nicfw.HostID(i + 1)
		ec := nicfw.EngineConfig{Host: id, Window: window}
		ec.Transport.Channels = max(window, transport.DefaultChannels)
		if config != "off" && id != rxID {
			cc := coord.Config{LinkRate: cfg.LinkRate, PortBuffer: cfg.PortBuffer}
			if cfg.PortBuffer > 0 {
				cc.Threshold = max(256, cfg.PortBuffer/len(all))
			}
			if config == "on+etr" {
				cc.EarlyRelease = cfg.EarlyRelease
			}
			m := coord.New(cc)
			mods = append(mods, m)
			ec.Modules = []nicfw.Module{m}
		}
		peers := make(map[nicfw.HostID]datapath.Place)
		for j, q := range all {
			if j != i {
				peers[nicfw.HostID(j+1)] = q
			}
		}
		table := []amii.Name{{Host: rxID, Endpoint: amiiEndpoint}}
		acfg := amii.Config{Credits: window, StagingSize: 2 * window * size, MediumSlots: -1}
		if id == rxID {
			table = nil
			for j := range n {
				table = append(table, amii.Name{Host: nicfw.HostID(j + 1), Endpoint: amiiEndpoint})
			}
			acfg = amii.Config{Credits: window, StagingSize: max(64<<10, n*size), MediumSlots: -1}
		}
		h, err := openAMIIHost(p, ec, peers, cfg.Mode, 0, table, acfg, nil)
		if err != nil {
			return hosts, nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, mods, nil
}

// closeAll closes hosts.
func closeAll(hosts []*amiiHost) {
	for _, h := range hosts {
		h.close()
	}
}

// incastAMII runs one AM-II measurement: each sender an inline engine (with
// the coordination module unless config is "off") and an AM-II endpoint
// storing each bytes in messages of size bytes into the receiver's, all senders driven
// by one goroutine, the receiver by another.
func incastAMII(senders []datapath.Place, rx datapath.Place, config string, size int, each int64, cfg incastConfig) (*incastPointRow, error) {
	n := len(senders)
	const window = 8
	hosts, mods, err := openIncast(senders, rx, config, size, window, cfg)
	defer closeAll(hosts)
	if err != nil {
		return nil, err
	}
	server := hosts[n]
	var delivered, bytes atomic.Int64
	if err := server.am.HandleMedium(1, func(_ *amii.Token, _ []uint64, data []byte) {
		bytes.Add(int64(len(data)))
		delivered.Add(1)
	}); err != nil {
		return nil, err
	}
	per := int((each + int64(size) - 1) / int64(size))
	total := per * n
	stop := spinServe(server)
	start := time.Now()
	err = func() error {
		sent := make([]int, n)
		deadline := start.Add(5 * time.Minute)
		for delivered.Load() < int64(total) {
			for i, h := range hosts[:n] {
				// Each sender keeps its window of Stores outstanding;
				// slots of its staging area are reused in turn.
				for sent[i] < per && h.am.Outstanding() < window {
					slot := uint32(sent[i]%(2*window)) * uint32(size)
					if err := h.am.Store(amii.Bulk{Dest: 0, Local: slot, Remote: uint32(i * size), Length: uint32(size), Handler: 1}); err != nil {
						return err
					}
					sent[i]++
				}
				if _, err := h.am.Poll(); err != nil {
					return err
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d messages after 5 minutes", delivered.Load(), total)
			}
		}
		return nil
	}()
	elapsed := time.Since(start)
	if err := errors.Join(err, stop()); err != nil {
		return nil, err
	}
	p := &incastPointRow{Config: config, Senders: n, Size: size, Messages: total, Seconds: elapsed.Seconds(),
		Mbps: float64(bytes.Load()) * 8 / elapsed.Seconds() / 1e6}
	for _, h := range hosts[:n] {
		p.Retransmits += h.eng.TransportStats().Retransmits
	}
	var grants uint64
	for _, m := range mods {
		grants += m.Stats().GrantsRecv
	}
	if len(mods) > 0 {
		p.Handoffs = float64(grants) / float64(total)
	}
	return p, nil
}

// incastTCP runs one kernel TCP measurement: each sender a stream of
// bytes in writes of size bytes to the receiver, all at once.
func incastTCP(senders []datapath.Place, addrs []netip.Addr, rx datapath.Place, rxAddr netip.Addr, size int, each int64) (*incastPointRow, error) {
	var ln net.Listener
	if err := rx.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(rxAddr, 0).String())
		return err
	}); err != nil {
		return nil, err
	}
	defer ln.Close()
	n := len(senders)
	var received atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range n {
		wg.Go(func() {
			c, err := ln.Accept()
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			k, err := io.Copy(io.Discard, c)
			received.Add(k)
			errs[i] = err
		})
	}
	start := time.Now()
	for i, s := range senders {
		wg.Go(func() {
			errs[n+i] = s.Do(func() error {
				d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(addrs[i], 0))}
				c, err := d.Dial("tcp", ln.Addr().String())
				if err != nil {
					return err
				}
				defer c.Close()
				buf := make([]byte, size)
				for left := each; left > 0; left -= int64(size) {
					if _, err := c.Write(buf[:min(int64(size), left)]); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &incastPointRow{Config: "tcp", Senders: n, Size: size, Messages: int(int64(n) * each / int64(size)),
		Seconds: elapsed.Seconds(), Mbps: float64(received.Load()) * 8 / elapsed.Seconds() / 1e6}, nil
}

// Markdown writes the result as a table.
func (r *incastResult) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("## Incast: n senders stream messages to one receiver through the switch\n\n")
	if r.PortRate > 0 {
		fmt.Fprintf(&b, "Switch ports shaped to %d bit/s, %d bytes of buffer each.\n\n", r.PortRate, r.PortBuffer)
	}
	if r.Interrupted {
		b.WriteString("**Interrupted**: the table holds what was measured before the run was stopped.\n\n")
	}
	b.WriteString("| message | senders | config | goodput Mbit/s | runs: min-max | x best one sender | switch drops | retransmits | token handoffs/msg |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Points {
		h := "-"
		if p.Handoffs > 0 {
			h = fmt.Sprintf("%.2f", p.Handoffs)
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.1f | %d: %.1f-%.1f | %.2f | %d | %d | %s |\n", p.Size, p.Senders, p.Config, p.Mbps, p.Runs, p.MinMbps, p.MaxMbps, p.Ratio, p.Drops, p.Retransmits, h)
	}
	if len(r.Latency) > 0 {
		b.WriteString("\n| without contention | message | p50 per Store (µs) |\n|---|---|---|\n")
		for _, l := range r.Latency {
			fmt.Fprintf(&b, "| %s | %d | %.1f |\n", l.Case, l.Size, l.P50)
		}
	}
	b.WriteString("\noff: AM-II Stores, no coordination; on: the coordination module (nicfw/coord), a token per receiver port; on+etr: with Early Token Release; tcp: as many kernel TCP streams between the same hosts. Goodput: the senders' bytes delivered to the receiver's handlers per second, the run of median goodput of those measured (its drops and retransmits too); x best one sender: over the best goodput of one sender at that size. Switch drops: frames the shaped port toward the receiver dropped (its tbf).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// charts gives goodput against message size for the most senders
// measured, a line per configuration (incast).
func (r *incastResult) charts() []chart {
	most := 0
	for _, p := range r.Points {
		most = max(most, p.Senders)
	}
	c := chart{name: "incast", title: fmt.Sprintf("Incast: %d senders to one receiver", most),
		xLabel: "message size (bytes, log scale)", yLabel: "aggregate goodput (Mbit/s)", logX: true, xBytes: true}
	for _, cf := range append(incastConfigs, "tcp") {
		var xs, ys []float64
		for _, p := range r.Points {
			if p.Config == cf && p.Senders == most {
				xs, ys = append(xs, float64(p.Size)), append(ys, p.Mbps)
			}
		}
		c.series = append(c.series, xy(cf, xs, ys))
	}
	return []chart{c}
}

// incastLatencyRow is the time one coordinated message takes without
// contention: a Store from its first send to its answer, one at a time.
type incastLatencyRow struct {
	Case string  `json:"case"` // off; on, token held; on, token moves
	Size int     `json:"message_bytes"`
	P50  float64 `json:"p50_us"`
}

// runIncastLatency measures, between two senders and the receiver, count
// Stores of size bytes one at a time: without coordination; with it, the
// sender holding the token already; and with the two senders taking turns,
// so that the token moves to each message's sender first (a request and a
// grant between their engines).
func runIncastLatency(senders []datapath.Place, rx datapath.Place, size, count int, cfg incastConfig) ([]incastLatencyRow, error) {
	if len(senders) < 2 {
		return nil, fmt.Errorf("incast latency needs two senders, not %d", len(senders))
	}
	var out []incastLatencyRow
	for _, c := range []struct {
		name, config string
		turns        bool
	}{{"off", "off", false}, {"on, token held", "on", false}, {"on, token moves", "on", true}} {
		p50, err := incastLatency(senders[:2], rx, c.config, c.turns, size, count, cfg)
		if err != nil {
			return nil, fmt.Errorf("incast latency, %s: %w", c.name, err)
		}
		out = append(out, incastLatencyRow{Case: c.name, Size: size, P50: p50})
	}
	return out, nil
}

func incastLatency(senders []datapath.Place, rx datapath.Place, config string, turns bool, size, count int, cfg incastConfig) (float64, error) {
	hosts, _, err := openIncast(senders, rx, config, size, 1, cfg)
	defer closeAll(hosts)
	if err != nil {
		return 0, err
	}
	server := hosts[len(senders)]
	if err := server.am.HandleMedium(1, func(*amii.Token, []uint64, []byte) {}); err != nil {
		return 0, err
	}
	stop := spinServe(server)
	times := make([]time.Duration, 0, count)
	err = func() error {
		for i := range count + count/10 { // a tenth to warm up
			h := hosts[0]
			if turns {
				h = hosts[i%2]
			}
			start := time.Now()
			if err := h.am.Store(amii.Bulk{Length: uint32(size), Handler: 1}); err != nil {
				return err
			}
			for deadline := start.Add(10 * time.Second); h.am.Outstanding() > 0; {
				for _, o := range hosts[:len(senders)] { // the other sender answers token requests
					if _, err := o.am.Poll(); err != nil {
						return err
					}
				}
				if time.Now().After(deadline) {
					return errors.New("a Store unanswered for 10 s")
				}
			}
			if i >= count/10 {
				times = append(times, time.Since(start))
			}
		}
		return nil
	}()
	if err := errors.Join(err, stop()); err != nil {
		return 0, err
	}
	return durUS(median(times)), nil
}

// spinServe polls h's endpoint in a goroutine of its own, running its
// handlers, until the returned function is called; that one returns the
// first error of a poll.
func spinServe(h *amiiHost) (stop func() error) {
	var done atomic.Bool
	var wg sync.WaitGroup
	var err error
	wg.Go(func() {
		for !done.Load() {
			if _, err = h.am.Poll(); err != nil {
				return
			}
		}
	})
	return func() error {
		done.Store(true)
		wg.Wait()
		return err
	}
}
