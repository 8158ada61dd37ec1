package bench

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// AM-II's permutations (the paper's table of three traffic patterns on a
// cluster): every host streams medium messages to one partner while
// another streams to it, all at once, then every host runs one-word round
// trips to its partner, all at once.
//
//   - circular shift: host i sends to i+1 and receives from i-1;
//   - neighbour exchange: hosts 2k and 2k+1 exchange;
//   - bisection: host i exchanges with i+n/2, across the middle.
//
// Each host is an AM-II endpoint on an inline engine of its own, driven by
// a goroutine of its own; one pair alone, the others idle, is the
// node-to-node reference ("near the peak" in the paper).

// permutationsConfig configures runPermutations. Zero fields take
// defaults.
type permutationsConfig struct {
	Duration   time.Duration // of each bandwidth phase (default 2 s)
	RTTs       int           // round trips per host (default 2000)
	Size       int           // bytes per medium message (default 4096)
	Window     int           // messages in flight per host (default 8)
	RunOptions               // the XDP attach mode, where progress goes, what stops the run
}

// permutationRow is one pattern's figures.
type permutationRow struct {
	Pattern   string  `json:"pattern"`
	PerHost   float64 `json:"avg_mb_per_s"`       // mean over hosts of what each received
	Aggregate float64 `json:"aggregate_mb_per_s"` // all hosts together
	MinHost   float64 `json:"min_mb_per_s"`
	MaxHost   float64 `json:"max_mb_per_s"`
	RTT       float64 `json:"avg_rtt_us"`
	VsPair    float64 `json:"avg_vs_one_pair"` // PerHost over one pair alone's
}

// permutationsResult is what runPermutations measured.
type permutationsResult struct {
	Hosts       int              `json:"hosts"`
	Size        int              `json:"message_bytes"`
	Seconds     float64          `json:"seconds_per_pattern"`
	Pair        *permutationRow  `json:"one_pair"` // host 0 to host 1, the others idle
	Rows        []permutationRow `json:"permutations"`
	Interrupted bool             `json:"interrupted,omitempty"`
}

// permutationPatterns maps a pattern to host i's partner among n.
var permutationPatterns = []struct {
	name string
	dst  func(i, n int) int
	src  func(i, n int) int
}{
	{"circular shift", func(i, n int) int { return (i + 1) % n }, func(i, n int) int { return (i + n - 1) % n }},
	{"neighbour exchange", func(i, _ int) int { return i ^ 1 }, func(i, _ int) int { return i ^ 1 }},
	{"bisection", func(i, n int) int { return (i + n/2) % n }, func(i, n int) int { return (i + n/2) % n }},
}

// runPermutations runs the three patterns among hosts (an even number, at
// least 4).
func runPermutations(hosts []datapath.Place, cfg permutationsConfig) (*permutationsResult, error) {
	n := len(hosts)
	if n < 4 || n%2 != 0 {
		return nil, fmt.Errorf("permutations need an even number of hosts, at least 4, not %d", n)
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
	}
	if cfg.RTTs == 0 {
		cfg.RTTs = 2000
	}
	if cfg.Size == 0 {
		cfg.Size = 4096
	}
	if cfg.Window == 0 {
		cfg.Window = 8
	}
	if cfg.Size < 1 || cfg.Size > endpoint.MaxMedium || cfg.Window < 1 || cfg.RTTs < 1 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("permutations: size %d (1..%d), window %d, round trips %d, duration %v", cfg.Size, endpoint.MaxMedium, cfg.Window, cfg.RTTs, cfg.Duration)
	}
	res := &permutationsResult{Hosts: n, Size: cfg.Size, Seconds: cfg.Duration.Seconds()}
	step := stepper(cfg.Stop, cfg.Progress, &res.Interrupted)
	if !step("one pair alone") {
		return res, nil
	}
	pair := func(i, n int) int {
		if i == 0 {
			return 1
		}
		return -1
	}
	var err error
	if res.Pair, err = permutation(hosts, "one pair", pair, func(i, n int) int {
		if i == 1 {
			return 0
		}
		return -1
	}, cfg); err != nil {
		return nil, fmt.Errorf("one pair: %w", err)
	}
	for _, p := range permutationPatterns {
		if !step(p.name) {
			return res, nil
		}
		row, err := permutation(hosts, p.name, p.dst, p.src, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		if res.Pair.PerHost > 0 {
			row.VsPair = row.PerHost / res.Pair.PerHost
		}
		res.Rows = append(res.Rows, *row)
	}
	return res, nil
}

// permHost is one host of a permutation: its AM-II host, and what it
// measured.
type permHost struct {
	h        *amiiHost
	dst      int // partner it sends to, or -1
	received atomic.Int64
	replies  int
	rttSum   time.Duration
	err      error
}

// poll polls the host's endpoint (and runs its inline engine); when that
// found nothing to do, it lets the other hosts' goroutines run: there are
// more hosts than CPUs.
func (h *permHost) poll() error {
	n, err := h.h.am.Poll()
	if n == 0 {
		runtime.Gosched()
	}
	return err
}

// permutation measures one pattern: dst(i) is the host i sends to (-1:
// none), src(i) the one it receives from.
func permutation(places []datapath.Place, name string, dst, src func(i, n int) int, cfg permutationsConfig) (*permutationRow, error) {
	n := len(places)
	hosts := make([]*permHost, n)
	defer closePermHosts(hosts)
	if err := openPermHosts(hosts, places, dst, src, cfg); err != nil {
		return nil, err
	}
	elapsed, err := permBandwidth(hosts, cfg)
	if err != nil {
		return nil, err
	}
	row := &permutationRow{Pattern: name}
	var rates []float64 // MB/s each receiving host received
	for i, h := range hosts {
		if src(i, n) >= 0 {
			rates = append(rates, float64(h.received.Load())/elapsed.Seconds()/1e6)
		}
	}
	row.PerHost, row.MinHost, row.MaxHost, row.Aggregate = spread(rates)
	if err := permRoundTrips(hosts, cfg); err != nil {
		return nil, err
	}
	row.RTT = permMeanRTT(hosts)
	return row, nil
}

// closePermHosts closes the hosts of a permutation that were opened; it
// runs however far openPermHosts got.
func closePermHosts(hosts []*permHost) {
	for _, h := range hosts {
		if h != nil && h.h != nil {
			h.h.close()
		}
	}
}

// openPermHosts fills hosts with one AM-II host for each place that sends
// or receives in the pattern, each on an inline engine that knows only its
// partners, with handler 1 counting medium bytes received and handler 2
// replying to a round trip on 3. A host of the one-pair run that neither
// sends nor receives gets a permHost without an AM-II host, and stays
// idle.
func openPermHosts(hosts []*permHost, places []datapath.Place, dst, src func(i, n int) int, cfg permutationsConfig) error {
	n := len(places)
	acfg := amii.Config{Credits: cfg.Window, QueueEntries: max(cfg.Window, endpoint.DefaultQueueEntries), MediumSlots: cfg.Window,
		StagingSize: max(endpoint.DefaultStagingSize, 2*cfg.Window*endpoint.MaxMedium)}
	id := func(i int) nicfw.HostID { return nicfw.HostID(i + 1) }
	for i, p := range places {
		hosts[i] = &permHost{dst: dst(i, n)}
		ec := nicfw.EngineConfig{Host: id(i), Window: cfg.Window}
		ec.Transport.Channels = max(2*cfg.Window, transport.DefaultChannels)
		peers := map[nicfw.HostID]datapath.Place{}
		var table []amii.Name
		for _, j := range []int{dst(i, n), src(i, n)} {
			if j >= 0 {
				peers[id(j)] = places[j]
				table = append(table, amii.Name{Host: id(j), Endpoint: amiiEndpoint})
			}
		}
		if len(table) == 0 { // an idle host of the one-pair run
			continue
		}
		h, err := openAMIIHost(p, ec, peers, cfg.Mode, 0, table, acfg, nil)
		if err != nil {
			return fmt.Errorf("host %d: %w", i, err)
		}
		hosts[i].h = h
		ph := hosts[i]
		if err := h.am.HandleMedium(1, func(_ *amii.Token, _ []uint64, data []byte) { ph.received.Add(int64(len(data))) }); err != nil {
			return err
		}
		if err := h.am.Handle(2, func(t *amii.Token, args []uint64) {
			if err := t.Reply(3, args...); err != nil && ph.err == nil {
				ph.err = err
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// runPermPhase runs phase on every active host at once, each in a
// goroutine of its own. A host that is done keeps polling (serving the
// hosts that send to it) until every host is done, so no host's partner
// stops answering under it. It returns the hosts' errors, each naming its
// host.
func runPermPhase(hosts []*permHost, phase func(h *permHost) error) error {
	active := 0
	for _, h := range hosts {
		if h.h != nil {
			active++
		}
	}
	var drained atomic.Int32
	var wg sync.WaitGroup
	for _, h := range hosts {
		if h.h == nil {
			continue
		}
		wg.Go(func() {
			err := phase(h)
			drained.Add(1)
			for err == nil && int(drained.Load()) < active {
				err = h.poll()
			}
			if err != nil && h.err == nil {
				h.err = err
			}
		})
	}
	wg.Wait()
	var errs []error
	for i, h := range hosts {
		if h.err != nil {
			errs = append(errs, fmt.Errorf("host %d: %w", i, h.err))
		}
	}
	return errors.Join(errs...)
}

// permBandwidth is phase 1, bandwidth: each host streams medium messages
// to its partner, cfg.Window in flight, until cfg.Duration has passed,
// then drains. It returns the time from the start until every host had
// drained, what the hosts' received bytes are divided by.
func permBandwidth(hosts []*permHost, cfg permutationsConfig) (time.Duration, error) {
	data := make([]byte, cfg.Size)
	start := time.Now()
	end := start.Add(cfg.Duration)
	err := runPermPhase(hosts, func(h *permHost) error {
		a := h.h.am
		for h.dst >= 0 && time.Now().Before(end) {
			for a.Outstanding() < cfg.Window {
				if err := a.RequestMedium(0, 1, data); err != nil {
					return err
				}
			}
			if err := h.poll(); err != nil {
				return err
			}
		}
		return a.Drain(30 * time.Second)
	})
	return time.Since(start), err
}

// permRoundTrips is phase 2, round trips: each host that sends makes
// cfg.RTTs one-word requests to its partner, one at a time, and adds up
// the time each took to its reply.
func permRoundTrips(hosts []*permHost, cfg permutationsConfig) error {
	return runPermPhase(hosts, func(h *permHost) error {
		a := h.h.am
		if h.dst < 0 {
			return nil
		}
		waiting := false
		var sent time.Time
		if err := a.Handle(3, func(*amii.Token, []uint64) {
			h.replies++
			h.rttSum += time.Since(sent)
			waiting = false
		}); err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for h.replies < cfg.RTTs {
			if !waiting {
				sent, waiting = time.Now(), true
				if err := a.Request(0, 2, uint64(h.replies)); err != nil {
					return err
				}
			}
			if err := h.poll(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d round trips after 60 s", h.replies, cfg.RTTs)
			}
		}
		return nil
	})
}

// permMeanRTT returns the mean round trip in µs over every reply the
// sending hosts received (0 if none).
func permMeanRTT(hosts []*permHost) float64 {
	var sum time.Duration
	count := 0
	for _, h := range hosts {
		if h.h != nil && h.dst >= 0 {
			sum += h.rttSum
			count += h.replies
		}
	}
	if count == 0 {
		return 0
	}
	return durUS(sum / time.Duration(count))
}

// spread returns the mean, least, most and sum of xs (zeros when empty).
func spread(xs []float64) (mean, least, most, sum float64) {
	if len(xs) == 0 {
		return 0, 0, 0, 0
	}
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs)), slices.Min(xs), slices.Max(xs), sum
}

// Markdown writes the permutations table.
func (r *permutationsResult) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## AM-II permutations, %d hosts (medium messages of %d bytes for %.1f s; one-word round trips)\n\n", r.Hosts, r.Size, r.Seconds)
	if r.Interrupted {
		b.WriteString("**Interrupted**: the table holds the patterns measured before the run was stopped.\n\n")
	}
	b.WriteString("| pattern | avg MB/s per host | min | max | aggregate MB/s | avg RTT (µs) | avg / one pair |\n|---|--:|--:|--:|--:|--:|--:|\n")
	rows := r.Rows
	if r.Pair != nil {
		rows = append([]permutationRow{*r.Pair}, rows...)
	}
	for _, x := range rows {
		vs := ""
		if x.VsPair > 0 {
			vs = fmt.Sprintf("%.2f", x.VsPair)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n", x.Pattern, x.PerHost, x.MinHost, x.MaxHost, x.Aggregate, x.RTT, vs)
	}
	b.WriteString("\nOne pair: host 0 streams to host 1 while the others are idle, the node-to-node reference. Every host runs an inline engine in a goroutine of its own; all share the machine's CPUs.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Figures returns the permutations' figures: each pattern's per-host
// bandwidth over one pair alone's (the paper: near the peak for circular
// shift and neighbour exchange) and its round trip.
func (r *permutationsResult) Figures() []Figure {
	var figs []Figure
	for _, x := range r.Rows {
		note := "near the peak"
		if x.Pattern == "bisection" {
			note = "limited by the network's bisection"
		}
		var bw, rtt []Peer
		if r.Pair != nil {
			bw, rtt = []Peer{peer("one pair alone", r.Pair.PerHost)}, []Peer{peer("one pair alone", r.Pair.RTT)}
		}
		figs = append(figs, noteFig(x.Pattern+": average bandwidth per host", "MB/s", note, x.PerHost, bw...))
		figs = append(figs, noteFig(x.Pattern+": average round trip", "µs", "within a small factor of the optimum", x.RTT, rtt...))
	}
	return figs
}

// charts gives per-host and aggregate bandwidth of each pattern as bars,
// one pair alone as a reference line (permutations).
func (r *permutationsResult) charts() []chart {
	per, agg := series{name: "average per host"}, series{name: "aggregate"}
	for _, x := range r.Rows {
		per.points = append(per.points, point{cat: x.Pattern, y: measure(x.PerHost)})
		agg.points = append(agg.points, point{cat: x.Pattern, y: measure(x.Aggregate)})
	}
	c := chart{name: "permutations", kind: barChart, title: fmt.Sprintf("AM-II permutations on %d hosts", r.Hosts), xLabel: "pattern", yLabel: "MB/s",
		series: []series{per, agg}}
	if r.Pair != nil && len(r.Rows) > 0 {
		c.refs = []ref{{"one pair alone, per host", measure(r.Pair.PerHost)}}
	}
	return []chart{c}
}
