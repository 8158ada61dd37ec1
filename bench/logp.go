package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/transport"
)

// AM-II's LogP measurement (Chun et al., section 5, after Culler et al.'s
// LogP microbenchmarks) on xam's inline engine, for short messages of 8
// bytes (one argument word):
//
//   - Os, send overhead: the time of one Request call on an idle sender
//     (the call queues the descriptor and runs the engine once, which
//     sends the frame), the median;
//   - Or, receive overhead: the time the receiver's thread spends per
//     message (its engine's receive work, the handler, queuing the
//     implicit reply), the median over the polls that ran handlers while
//     the sender streams, each up to the engine's run that sends the
//     replies;
//   - g, gap: the time per message of a stream of requests that keeps K
//     outstanding, on the sender;
//   - RTT: the median request/reply round trip;
//   - L, latency: RTT/2 - Os - Or.
//
// Each figure is taken in three configurations, so that the cost of each
// layer shows as an increment, as in AM-II's table: baseline (the
// transport unreliable — no channels, acknowledgements or retransmission —
// and the engine's protection checks off), + reliability, and
// + protection (the engine as it runs by default); then in a fourth,
// + pipelining, the default engine with a window of K messages per
// endpoint (EngineConfig.Window), which lets a stream of requests keep K
// in flight rather than one per round trip. The contention
// experiment runs 1..N client endpoints on one host, each keeping K
// requests outstanding, against one server endpoint on the other host,
// and reports the aggregate and per-client message rates and the mean
// round trip.

// logpConfig configures the LogP measurement. Zero fields take defaults.
type logpConfig struct {
	Count      int // messages per figure (default 20000)
	Clients    int // most clients of the contention experiment (default 7)
	RunOptions     // the XDP attach mode, where progress goes, what stops the run
	Queue      int // device queue
}

// logpRowResult is one configuration's figures, in microseconds, to 0.01 µs.
//
// What each means on this data path. Os is the sender's processor time
// per message and Or the receiver's, g the gap between messages of one
// endpoint's stream, RTT the round trip. L, the time a message spends
// between the two processors, is RTT/2 - Os - Or where that is positive.
// On veth it is not: the sender's sendto runs the receiver's kernel path
// (the frame is delivered to the receiving socket inside the system call),
// so Os holds what on a NIC is L, and L cannot be told apart from it. Then
// L is nil (JSON null; "in Os" in the table), never a negative latency.
type logpRowResult struct {
	Config string   `json:"config"`
	Os     float64  `json:"os_us"`
	Or     float64  `json:"or_us"`
	G      float64  `json:"g_us"`
	L      *float64 `json:"l_us"` // nil: not separable from Os here
	RTT    float64  `json:"rtt_us"`
}

// setL sets L from RTT, Os and Or, and rounds every figure to 0.01 µs.
func (r *logpRowResult) setL() {
	round := func(v float64) float64 { return math.Round(v*100) / 100 }
	r.Os, r.Or, r.G, r.RTT = round(r.Os), round(r.Or), round(r.G), round(r.RTT)
	r.L = nil
	if l := round(r.RTT/2 - r.Os - r.Or); l > 0 {
		r.L = &l
	}
}

// contentionRow is one point of the contention experiment.
type contentionRow struct {
	Clients   int     `json:"clients"`
	Aggregate float64 `json:"aggregate_msgs_per_s"`
	PerClient float64 `json:"per_client_msgs_per_s"`
	RTT       float64 `json:"rtt_us"` // mean request-to-reply time
	// Coalesced is the aggregate with the clients' requests coalesced
	// (amii.Config.Coalesce): each turn of the clients queues their
	// requests, and one engine run sends them packed into frames; the
	// server's replies of one poll leave packed as well, the engines
	// keeping up to K messages of an endpoint in flight (window K).
	Coalesced float64 `json:"coalesced_msgs_per_s"`
}

// logpResult is the outcome of runLogP (the JSON of `xam bench logp`).
type logpResult struct {
	Count      int             `json:"count"`
	Credits    int             `json:"credits"`
	Rows       []logpRowResult `json:"logp"`
	Contention []contentionRow `json:"contention"`
	// UCX: ucx_perftest ucp_am_lat between the same hosts (set by the
	// caller, which knows the hosts' addresses).
	UCX *ucxResult `json:"ucx,omitempty"`
	// Interrupted: the run was stopped (logpConfig.Stop) before its end.
	Interrupted bool `json:"interrupted,omitempty"`
}

// logpConfigs are the configurations, baseline first; coalesce makes the
// client's requests coalesce (amii.Config.Coalesce).
var logpConfigs = []struct {
	name     string
	cfg      nicfw.EngineConfig
	coalesce bool
}{
	{"baseline", nicfw.EngineConfig{Unprotected: true, Transport: transport.Config{Unreliable: true}}, false},
	{"+reliability", nicfw.EngineConfig{Unprotected: true}, false},
	{"+protection", nicfw.EngineConfig{}, false},
	{"+pipelining", nicfw.EngineConfig{Window: amii.DefaultCredits}, false},
	{"+batching", nicfw.EngineConfig{Window: amii.DefaultCredits}, true},
}

// runLogP runs the LogP measurement between a (sender, client) and b
// (receiver, server).
func runLogP(a, b datapath.Place, cfg logpConfig) (*logpResult, error) {
	if cfg.Count == 0 {
		cfg.Count = 20000
	}
	if cfg.Clients == 0 {
		cfg.Clients = 7
	}
	if cfg.Count < 100 || cfg.Clients < 1 || cfg.Clients > 64 {
		return nil, fmt.Errorf("LogP: count %d (at least 100), clients %d (1..64)", cfg.Count, cfg.Clients)
	}
	res := &logpResult{Count: cfg.Count, Credits: amii.DefaultCredits}
	stop := func() bool {
		res.Interrupted = cfg.Stop != nil && cfg.Stop.Load()
		return res.Interrupted
	}
	for _, c := range logpConfigs {
		if stop() {
			return res, nil
		}
		row, err := logpRow(a, b, cfg, c.cfg, c.coalesce)
		if err != nil {
			return nil, fmt.Errorf("LogP %s: %w", c.name, err)
		}
		row.Config = c.name
		res.Rows = append(res.Rows, *row)
	}
	for n := 1; n <= cfg.Clients; n++ {
		if stop() {
			return res, nil
		}
		row, err := contention(a, b, cfg, n, false)
		if err != nil {
			return nil, fmt.Errorf("contention with %d clients: %w", n, err)
		}
		co, err := contention(a, b, cfg, n, true)
		if err != nil {
			return nil, fmt.Errorf("contention with %d coalescing clients: %w", n, err)
		}
		row.Coalesced = co.Aggregate
		res.Contention = append(res.Contention, *row)
	}
	return res, nil
}

// logpHost is one host of the measurement: its engine and AM-II endpoints.
type logpHost struct {
	raw *datapath.Endpoint
	eng *nicfw.Engine
	ams []*amii.Endpoint
	// onPoll, if set, is called before each run of the engine by the
	// AM-II endpoints.
	onPoll func()
}

func (h *logpHost) close() error {
	var errs []error
	for _, a := range h.ams {
		errs = append(errs, a.Close())
	}
	if h.eng != nil {
		errs = append(errs, h.eng.Close())
	}
	if h.raw != nil {
		errs = append(errs, h.raw.Close())
	}
	return errors.Join(errs...)
}

// openLogPHost builds host id at p with endpoints 1..n, each with the
// translation table table(i), on an engine configured by ecfg.
func openLogPHost(p datapath.Place, id nicfw.HostID, peer datapath.Place, peerID nicfw.HostID, cfg logpConfig, ecfg nicfw.EngineConfig, n int, table func(i int) []nicfw.Name, coalesce bool) (h *logpHost, err error) {
	h = &logpHost{}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if h.raw, err = datapath.Open(p, cfg.Mode, cfg.Queue); err != nil {
		return nil, err
	}
	ecfg.Host = id
	ecfg.Resident = max(n+1, nicfw.DefaultResident)
	if h.eng, err = nicfw.NewEngine(h.raw.Sock, ecfg); err != nil {
		return nil, err
	}
	if err = h.eng.AddHost(peerID, peer.MAC); err != nil {
		return nil, err
	}
	for i := range n {
		poll := func() (int, error) {
			if h.onPoll != nil {
				h.onPoll()
			}
			return h.eng.Poll()
		}
		a, err := amii.New(h.eng, amii.VNet{ID: nicfw.EndpointID(i + 1), Tag: amiiTag, Table: table(i)}, amii.Config{RunEngine: poll, Coalesce: coalesce})
		if err != nil {
			return nil, err
		}
		h.ams = append(h.ams, a)
	}
	return h, nil
}

// serve runs b's endpoint 0 until stop, recording with orHist, while
// measure is set, the receive overhead per handler of each poll that ran
// some: the time from the start of the poll to the engine's second run in
// it, which sends the replies the handlers queued (amii.Endpoint.Poll), so that
// the engine's receive work, the handlers and the queuing of the replies
// count and the replies' sending does not (that is their send overhead).
// Polls whose first engine run sent something are left out.
func serve(b *logpHost, stop, measure *atomic.Bool, orHist *[]time.Duration) error {
	s := b.ams[0]
	var runs int
	var second time.Time
	var sentBefore, sentAtSecond uint64
	b.onPoll = func() {
		if runs++; runs == 2 {
			second, sentAtSecond = time.Now(), b.eng.Stats().Sent
		}
	}
	defer func() { b.onPoll = nil }()
	for !stop.Load() {
		runs = 0
		sentBefore = b.eng.Stats().Sent
		t0 := time.Now()
		n, err := s.Poll()
		if err != nil {
			return err
		}
		if n > 0 && runs == 2 && measure.Load() && sentAtSecond == sentBefore {
			*orHist = append(*orHist, second.Sub(t0)/time.Duration(n))
		}
	}
	return nil
}

// Handler indices on the server: echo replies, null does not (the
// implicit reply answers it).
const (
	logpEcho = 0
	logpNull = 1
)

func logpRow(pa, pb datapath.Place, cfg logpConfig, ecfg nicfw.EngineConfig, coalesce bool) (*logpRowResult, error) {
	one := func(int) []nicfw.Name { return []nicfw.Name{{Host: amiiHostB, Endpoint: 1}} }
	back := func(int) []nicfw.Name { return []nicfw.Name{{Host: amiiHostA, Endpoint: 1}} }
	ha, err := openLogPHost(pa, amiiHostA, pb, amiiHostB, cfg, ecfg, 1, one, coalesce)
	if err != nil {
		return nil, err
	}
	defer ha.close()
	hb, err := openLogPHost(pb, amiiHostB, pa, amiiHostA, cfg, ecfg, 1, back, false)
	if err != nil {
		return nil, err
	}
	defer hb.close()
	var handlerErr error
	hb.ams[0].Register(func(t *amii.Token, args []uint64) {
		if err := t.Reply(0, args...); err != nil && handlerErr == nil {
			handlerErr = err
		}
	})
	hb.ams[0].Register(func(*amii.Token, []uint64) {})
	answered := 0
	a := ha.ams[0]
	a.Register(func(*amii.Token, []uint64) { answered++ })

	var stop, measure atomic.Bool
	var ors []time.Duration
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() { serveErr = serve(hb, &stop, &measure, &ors) })
	row, err := logpClient(a, 0, cfg, &answered, func(on bool) error { measure.Store(on); return nil })
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, serveErr, handlerErr); err != nil {
		return nil, err
	}
	row.Or = durUS(median(ors))
	row.setL()
	return row, nil
}

// logpClient is the sender's side, to the receiver at index dest of a's
// table: RTT, Os and g, marking (mark(true), then mark(false)) the stream
// during which the receiver takes Or.
func logpClient(a *amii.Endpoint, dest int, cfg logpConfig, answered *int, mark func(on bool) error) (*logpRowResult, error) {
	row := &logpRowResult{}
	limit := 5 * time.Second
	wait := func(n int) error {
		start := time.Now()
		for spins := 0; *answered < n; spins++ {
			if _, err := a.Poll(); err != nil {
				return err
			}
			if spins&1023 == 1023 && time.Since(start) > limit {
				return fmt.Errorf("%d of %d replies after %v", *answered, n, limit)
			}
		}
		return nil
	}
	// RTT.
	rtts := make([]time.Duration, 0, cfg.Count)
	warm := min(cfg.Count/10, 1000)
	for i := range warm + cfg.Count {
		t0 := time.Now()
		if err := a.Request(dest, logpEcho, uint64(i)); err != nil {
			return nil, err
		}
		if err := wait(i + 1); err != nil {
			return nil, err
		}
		if i >= warm {
			rtts = append(rtts, time.Since(t0))
		}
	}
	row.RTT = durUS(median(rtts))
	// Os: one request at a time, each call timed, with the endpoint idle:
	// the call queues the descriptor and its engine run sends the frame.
	// (A request queued behind one in flight would only be queued: the
	// engine keeps one message per endpoint in flight, for ordering.)
	sends := make([]time.Duration, 0, cfg.Count)
	for len(sends) < cfg.Count {
		if err := a.Drain(limit); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := a.Request(dest, logpNull, 0); err != nil {
			return nil, err
		}
		if a.Config().Coalesce {
			// The request only queued: the poll's engine run sends it.
			if _, err := a.Poll(); err != nil {
				return nil, err
			}
		}
		sends = append(sends, time.Since(t0))
	}
	if err := a.Drain(limit); err != nil {
		return nil, err
	}
	row.Os = durUS(median(sends))
	// g: a stream keeping K outstanding (Request polls for a credit).
	if err := mark(true); err != nil {
		return nil, err
	}
	t0 := time.Now()
	for range cfg.Count {
		if err := a.Request(dest, logpNull, 0); err != nil {
			return nil, err
		}
	}
	if err := a.Drain(limit); err != nil {
		return nil, err
	}
	row.G = durUS(time.Since(t0) / time.Duration(cfg.Count))
	return row, mark(false)
}

// contention runs n clients on a against one server endpoint on b.
func contention(pa, pb datapath.Place, cfg logpConfig, n int, coalesce bool) (*contentionRow, error) {
	toServer := func(int) []nicfw.Name { return []nicfw.Name{{Host: amiiHostB, Endpoint: 1}} }
	clients := make([]nicfw.Name, n)
	for i := range clients {
		clients[i] = nicfw.Name{Host: amiiHostA, Endpoint: nicfw.EndpointID(i + 1)}
	}
	// Coalescing runs pipeline too: each endpoint keeps up to its
	// credits in flight (the engines' window), so the server's replies of
	// one poll leave together rather than one per acknowledgement.
	ecfg := nicfw.EngineConfig{}
	if coalesce {
		ecfg.Window = amii.DefaultCredits
		ecfg.Transport.Channels = min(2*n*amii.DefaultCredits, transport.MaxChannels)
	}
	ha, err := openLogPHost(pa, amiiHostA, pb, amiiHostB, cfg, ecfg, n, toServer, coalesce)
	if err != nil {
		return nil, err
	}
	defer ha.close()
	hb, err := openLogPHost(pb, amiiHostB, pa, amiiHostA, cfg, ecfg, 1, func(int) []nicfw.Name { return clients }, false)
	if err != nil {
		return nil, err
	}
	defer hb.close()
	var handlerErr error
	hb.ams[0].Register(func(t *amii.Token, args []uint64) {
		if err := t.Reply(0, args...); err != nil && handlerErr == nil {
			handlerErr = err
		}
	})
	// Each reply carries its request's send time (ns since start).
	start := time.Now()
	var rttSum time.Duration
	done := make([]int, n)
	for i, a := range ha.ams {
		a.Register(func(_ *amii.Token, args []uint64) {
			done[i]++
			rttSum += time.Since(start) - time.Duration(args[0])
		})
	}
	var stop, measure atomic.Bool
	var ors []time.Duration
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() { serveErr = serve(hb, &stop, &measure, &ors) })
	err = func() error {
		per := max(cfg.Count/n, 100)
		sent := make([]int, n)
		total := 0
		deadline := time.Now().Add(30 * time.Second)
		for total < per*n {
			for i, a := range ha.ams {
				// Each client sends while it has credits, as a stream does.
				for sent[i] < per && a.Outstanding() < a.Config().Credits {
					if err := a.Request(0, 0, uint64(time.Since(start))); err != nil {
						return err
					}
					sent[i]++
				}
				if !coalesce {
					if _, err := a.Poll(); err != nil {
						return err
					}
				}
			}
			if coalesce {
				// The first poll's engine run sends every client's
				// request; the others run their handlers.
				for _, a := range ha.ams {
					if _, err := a.Poll(); err != nil {
						return err
					}
				}
			}
			total = 0
			for _, d := range done {
				total += d
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d replies after 30 s", total, per*n)
			}
		}
		return nil
	}()
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, serveErr, handlerErr); err != nil {
		return nil, err
	}
	total := 0
	for _, d := range done {
		total += d
	}
	agg := float64(total) / elapsed.Seconds()
	return &contentionRow{Clients: n, Aggregate: agg, PerClient: agg / float64(n), RTT: durUS(rttSum / time.Duration(total))}, nil
}

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	h := newHistogram()
	for _, d := range ds {
		h.RecordValue(int64(d))
	}
	return time.Duration(h.ValueAtQuantile(50))
}

// Markdown writes the LogP table with each configuration's increment over
// the one before, and the contention table.
func (r *logpResult) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## AM-II LogP, short messages (µs; medians of %d; K = %d credits)\n\n", r.Count, r.Credits)
	if r.Interrupted {
		b.WriteString("**Interrupted**: the tables hold the rows measured before the run was stopped.\n\n")
	}
	b.WriteString("| configuration | Os | Or | g | L | RTT |\n|---|---|---|---|---|---|\n")
	l := func(v *float64, sign string) string {
		if v == nil {
			return "in Os"
		}
		return fmt.Sprintf("%"+sign+".2f", *v)
	}
	for i, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %s | %.2f |\n", row.Config, row.Os, row.Or, row.G, l(row.L, ""), row.RTT)
		if i > 0 {
			p := r.Rows[i-1]
			dl := "-"
			if row.L != nil && p.L != nil {
				d := *row.L - *p.L
				dl = l(&d, "+")
			}
			fmt.Fprintf(&b, "| increment | %+.2f | %+.2f | %+.2f | %s | %+.2f |\n", row.Os-p.Os, row.Or-p.Or, row.G-p.G, dl, row.RTT-p.RTT)
		}
	}
	if u := r.UCX; u != nil && u.Missing != "" {
		fmt.Fprintf(&b, "| UCX AM over TCP | | | | | %s |\n", u.Missing)
	} else if u != nil {
		fmt.Fprintf(&b, "| UCX AM over TCP (ucx_perftest -t %s, %d B) | | | | | %.2f |\n", u.Test, u.Size, u.RTT)
	}
	b.WriteString("\nBaseline: unreliable transport, no protection checks; + reliability: channels, acknowledgements, retransmission; + protection: descriptor validation and tag checks (the default engine); + pipelining: K messages of an endpoint in flight at once (window K); + batching: the client's requests coalesce (amii.Config.Coalesce) until it polls or runs out of credits, and one engine run sends them packed into frames (its Os: the request and the poll that sends it).\n\n")
	b.WriteString("Os: the sender's processor time per message; Or: the receiver's; g: the gap between messages of one endpoint's stream; RTT: the round trip; L = RTT/2 - Os - Or, the time between the processors. \"in Os\": on veth the sender's sendto runs the receiver's kernel path, so the network's time is inside Os and L cannot be separated from it (on a NIC it can).\n\n")
	if len(r.Contention) > 0 { // a job's LogP has none (its n clients are job-clients)
		b.WriteString("## Contention: n clients, one server endpoint\n\n| clients | aggregate msgs/s | per client msgs/s | mean RTT (µs) | coalesced aggregate msgs/s |\n|---|---|---|---|---|\n")
		for _, c := range r.Contention {
			fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.1f | %.0f |\n", c.Clients, c.Aggregate, c.PerClient, c.RTT, c.Coalesced)
		}
		b.WriteString("\nCoalesced: the clients' requests of one turn leave in one engine run, packed into frames (amii.Config.Coalesce), and so do the server's replies of one poll; the engines keep up to K messages of an endpoint in flight (window K).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func durUS(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
