package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// AM-II's overcommit experiment (the paper's "multiple virtual networks"):
// n clients on host A, each an endpoint of a virtual network of its own
// whose other endpoint is one of n server endpoints on host B. Host B's
// engine holds R endpoint frames; past R endpoints, the server's endpoints
// fault in and out of the frames on demand (nicfw.Residency). Each server
// endpoint has a thread (goroutine) of its own that blocks in Wait (the
// daemon's eventfd, the paper's semaphore) and answers the requests that
// woke it; each client has one too, a request in flight at a time. Both
// hosts run firmware daemons, host A's with frames for all its clients, so
// that only the server is overcommitted.

// overcommitConfig configures runOvercommit. Zero fields take defaults.
type overcommitConfig struct {
	Resident   int           // R, host B's endpoint frames (default 4)
	Factors    []int         // endpoints per frame (default 1, 2, 4, 8)
	Duration   time.Duration // of each point (default 2 s)
	RunOptions               // the XDP attach mode, where progress goes, what stops the run
}

// overcommitRow is one point: Endpoints = Factor x Resident virtual
// networks.
type overcommitRow struct {
	Factor    int     `json:"factor"`
	Endpoints int     `json:"endpoints"`
	Rate      float64 `json:"server_msgs_per_s"`
	PerClient float64 `json:"avg_client_msgs_per_s"`
	MinClient float64 `json:"min_client_msgs_per_s"`
	MaxClient float64 `json:"max_client_msgs_per_s"`
	VsOne     float64 `json:"rate_vs_1x"`
	Faults    uint64  `json:"endpoint_faults"`    // host B's endpoint loads
	NACKs     uint64  `json:"not_resident_nacks"` // deliveries refused: no frame free
}

// overcommitResult is what runOvercommit measured.
type overcommitResult struct {
	Resident    int             `json:"resident_frames"`
	Seconds     float64         `json:"seconds_per_point"`
	Rows        []overcommitRow `json:"rows"`
	Interrupted bool            `json:"interrupted,omitempty"`
}

// runOvercommit measures the server's message rate at each factor between
// a (clients) and b (servers).
func runOvercommit(a, b datapath.Place, cfg overcommitConfig) (*overcommitResult, error) {
	if cfg.Resident == 0 {
		cfg.Resident = 4
	}
	if len(cfg.Factors) == 0 {
		cfg.Factors = []int{1, 2, 4, 8}
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
	}
	for _, f := range cfg.Factors {
		if f < 1 || f*cfg.Resident > 48 {
			return nil, fmt.Errorf("overcommit factor %d with %d frames: want 1..%d", f, cfg.Resident, 48/cfg.Resident)
		}
	}
	if cfg.Resident < 2 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("overcommit: %d frames (at least 2), duration %v", cfg.Resident, cfg.Duration)
	}
	res := &overcommitResult{Resident: cfg.Resident, Seconds: cfg.Duration.Seconds()}
	step := stepper(cfg.Stop, cfg.Progress, &res.Interrupted)
	for _, f := range cfg.Factors {
		if !step(fmt.Sprintf("%dx: %d virtual networks on %d frames", f, f*cfg.Resident, cfg.Resident)) {
			break
		}
		row, err := overcommit(a, b, f*cfg.Resident, cfg)
		if err != nil {
			return nil, fmt.Errorf("%dx: %w", f, err)
		}
		row.Factor = f
		if len(res.Rows) > 0 && res.Rows[0].Rate > 0 {
			row.VsOne = row.Rate / res.Rows[0].Rate
		} else {
			row.VsOne = 1
		}
		res.Rows = append(res.Rows, *row)
	}
	return res, nil
}

// overcommitSleep is how long the engine polls without work before it
// sleeps.
const overcommitSleep = 50 * time.Microsecond

// overcommit measures n virtual networks for cfg.Duration.
func overcommit(a, b datapath.Place, n int, cfg overcommitConfig) (*overcommitRow, error) {
	dir, err := os.MkdirTemp("", "xam-overcommit")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// One engine thread for both hosts (a NIC processor with two ports)
	// that sleeps when idle: the threads blocked in Wait need the CPUs.
	hosts, closeAll, err := startFirmwareHosts(a, b, dir, cfg.Mode, 0, true, func(i int, _ *datapath.Endpoint, c *daemon.Config) error {
		c.Engine.Resident, c.Sleep = cfg.Resident, overcommitSleep
		if i == 0 {
			c.Engine.Resident = n + 2 // the clients' host is not overcommitted
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer closeAll()
	clients, servers := make([]*amii.Endpoint, n), make([]*amii.Endpoint, n)
	defer func() {
		for _, e := range append(clients, servers...) {
			if e != nil {
				e.Close()
			}
		}
	}()
	if err := dialVNets(hosts, clients, servers); err != nil {
		return nil, err
	}
	before, err := hosts[1].d.Stats()
	if err != nil {
		return nil, err
	}
	load := &overcommitLoad{errs: make([]error, 2*n), counts: make([]atomic.Int64, n)}
	elapsed, err := load.run(clients, servers, cfg.Duration)
	if err != nil {
		return nil, err
	}
	after, err := hosts[1].d.Stats()
	if err != nil {
		return nil, err
	}
	row := &overcommitRow{Endpoints: n,
		Faults: after.Residency.Faults - before.Residency.Faults, NACKs: after.Engine.NotResident - before.Engine.NotResident}
	rates := make([]float64, n)
	for i := range load.counts {
		rates[i] = float64(load.counts[i].Load()) / elapsed.Seconds()
	}
	row.PerClient, row.MinClient, row.MaxClient, row.Rate = spread(rates)
	return row, nil
}

// dialVNets opens the virtual networks' endpoints, one per element of
// clients and servers: virtual network i (endpoint i+1 on both hosts) has
// its server on host B and its client on host A. What it opened is left in
// the slices, for the caller to close.
func dialVNets(hosts [2]*firmwareHost, clients, servers []*amii.Endpoint) error {
	acfg := amii.Config{Spin: -1, QueueEntries: 16, StagingSize: 8192, MediumSlots: -1}
	vnet := func(i int, peer nicfw.HostID) amii.VNet {
		return amii.VNet{ID: nicfw.EndpointID(i + 1), Tag: amiiTag + uint64(i), Table: []amii.Name{{Host: peer, Endpoint: nicfw.EndpointID(i + 1)}}}
	}
	var err error
	for i := range servers {
		if servers[i], err = amii.Dial(hosts[1].sock, vnet(i, amiiHostA), acfg); err != nil {
			return fmt.Errorf("server endpoint %d: %w", i+1, err)
		}
		if clients[i], err = amii.Dial(hosts[0].sock, vnet(i, amiiHostB), acfg); err != nil {
			return fmt.Errorf("client endpoint %d: %w", i+1, err)
		}
	}
	return nil
}

// answerBound bounds how long a point's counting waits, past its duration,
// for a client without a reply yet: on a loaded machine the endpoints'
// faults can keep one waiting past a short duration.
const answerBound = 20 * time.Second

// overcommitLoad is the traffic of one point: a goroutine for each
// endpoint, blocking in Wait, and what they count and fail with.
type overcommitLoad struct {
	stop      atomic.Bool    // the goroutines are to return
	measuring atomic.Bool    // the clients count their replies
	errs      []error        // each server's, then each client's
	counts    []atomic.Int64 // replies each client had while measuring
	wg        sync.WaitGroup
}

// run starts the servers and clients, lets every virtual network make its
// first round trip (its endpoints' first faults), counts the replies for
// d, and on until every client has had one (within answerBound: a client
// starved for longer keeps its 0), and stops them all. It returns the time
// the counting took.
func (l *overcommitLoad) run(clients, servers []*amii.Endpoint, d time.Duration) (time.Duration, error) {
	for i, s := range servers {
		if err := l.serve(i, s); err != nil {
			return 0, err
		}
	}
	for i, c := range clients {
		if err := l.request(i, c); err != nil {
			return 0, err
		}
	}
	time.Sleep(d / 4)
	l.measuring.Store(true)
	start := time.Now()
	time.Sleep(d)
	for time.Since(start) < d+answerBound && l.unanswered() {
		time.Sleep(time.Millisecond)
	}
	l.measuring.Store(false)
	elapsed := time.Since(start)
	l.stop.Store(true)
	l.wg.Wait()
	return elapsed, errors.Join(l.errs...)
}

// unanswered reports whether a client has had no reply yet.
func (l *overcommitLoad) unanswered() bool {
	for i := range l.counts {
		if l.counts[i].Load() == 0 {
			return true
		}
	}
	return false
}

// serve starts server endpoint i's goroutine: it waits for requests and
// answers each with a reply of the same arguments.
func (l *overcommitLoad) serve(i int, s *amii.Endpoint) error {
	var handlerErr error
	if err := s.Handle(1, func(t *amii.Token, args []uint64) {
		if err := t.Reply(2, args...); err != nil && handlerErr == nil {
			handlerErr = err
		}
	}); err != nil {
		return err
	}
	l.wg.Go(func() {
		for !l.stop.Load() && handlerErr == nil {
			if _, err := s.Wait(50 * time.Millisecond); err != nil {
				l.errs[i] = err
				return
			}
			if _, err := s.Poll(); err != nil {
				l.errs[i] = err
				return
			}
		}
		l.errs[i] = handlerErr
	})
	return nil
}

// request starts client endpoint i's goroutine: one request in flight at
// a time, its replies counted while measuring.
func (l *overcommitLoad) request(i int, c *amii.Endpoint) error {
	n := len(l.counts)
	if err := c.Handle(2, func(*amii.Token, []uint64) {
		if l.measuring.Load() {
			l.counts[i].Add(1)
		}
	}); err != nil {
		return err
	}
	l.wg.Go(func() {
		for !l.stop.Load() {
			if c.Outstanding() == 0 {
				if err := c.Request(0, 1, uint64(i)); err != nil {
					l.errs[n+i] = err
					return
				}
			}
			if _, err := c.Wait(50 * time.Millisecond); err != nil {
				l.errs[n+i] = err
				return
			}
			if _, err := c.Poll(); err != nil {
				l.errs[n+i] = err
				return
			}
		}
	})
	return nil
}

// Markdown writes the overcommit table.
func (r *overcommitResult) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## AM-II overcommit: virtual networks on %d endpoint frames (%.1f s per point)\n\n", r.Resident, r.Seconds)
	if r.Interrupted {
		b.WriteString("**Interrupted**: the table holds the points measured before the run was stopped.\n\n")
	}
	b.WriteString("| overcommit | virtual networks | server msgs/s | / 1x | per client avg | min | max | endpoint faults | NACKs (no frame) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %dx | %d | %.0f | %.2f | %.0f | %.0f | %.0f | %d | %d |\n", x.Factor, x.Endpoints, x.Rate, x.VsOne, x.PerClient, x.MinClient, x.MaxClient, x.Faults, x.NACKs)
	}
	b.WriteString("\nEach virtual network: a client endpoint on host A, a server endpoint on host B, one request in flight; every endpoint has a goroutine blocking in Wait (the daemon's eventfd). Both hosts run firmware daemons; host A's holds all its clients, host B's only R endpoints at once. Target: at 8x at least half of 1x's rate.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Figures returns the overcommit figures: each factor's server rate
// against 1x's.
func (r *overcommitResult) Figures() []Figure {
	var figs []Figure
	if len(r.Rows) == 0 {
		return nil
	}
	one := r.Rows[0]
	for _, x := range r.Rows {
		figs = append(figs, noteFig(fmt.Sprintf("server message rate, %dx overcommitted (%d virtual networks)", x.Factor, x.Endpoints), "msgs/s",
			"degrades gracefully (target: at 8x at least half of 1x)", x.Rate, peer(fmt.Sprintf("%dx", one.Factor), one.Rate)))
	}
	return figs
}

// charts gives the server's and the average client's rates against the
// overcommit factor (overcommit).
func (r *overcommitResult) charts() []chart {
	var xs, srv, per []float64
	for _, x := range r.Rows {
		xs = append(xs, float64(x.Factor))
		srv, per = append(srv, x.Rate), append(per, x.PerClient)
	}
	return []chart{{name: "overcommit", title: fmt.Sprintf("AM-II: virtual networks on %d endpoint frames", r.Resident),
		xLabel: "overcommit factor (endpoints per frame, log scale)", yLabel: "messages per second", logX: true,
		series: []series{xy("server", xs, srv), xy("per client", xs, per)}}}
}
