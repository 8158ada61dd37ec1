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
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"gonum.org/v1/plot/plotter"
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

// OvercommitConfig configures RunOvercommit. Zero fields take defaults.
type OvercommitConfig struct {
	Resident int           // R, host B's endpoint frames (default 4)
	Factors  []int         // endpoints per frame (default 1, 2, 4, 8)
	Duration time.Duration // of each point (default 2 s)
	Mode     loader.Mode
	// Progress, if set, is told what is measured next.
	Progress func(what string)
	// Stop, when set, ends the run before its next measurement.
	Stop *atomic.Bool
}

// OvercommitRow is one point: Endpoints = Factor x Resident virtual
// networks.
type OvercommitRow struct {
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

// OvercommitResult is what RunOvercommit measured.
type OvercommitResult struct {
	Resident    int             `json:"resident_frames"`
	Seconds     float64         `json:"seconds_per_point"`
	Rows        []OvercommitRow `json:"rows"`
	Interrupted bool            `json:"interrupted,omitempty"`
}

// RunOvercommit measures the server's message rate at each factor between
// a (clients) and b (servers).
func RunOvercommit(a, b datapath.Place, cfg OvercommitConfig) (*OvercommitResult, error) {
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
			return nil, fmt.Errorf("bench: overcommit factor %d with %d frames: want 1..%d", f, cfg.Resident, 48/cfg.Resident)
		}
	}
	if cfg.Resident < 2 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("bench: overcommit: %d frames (at least 2), duration %v", cfg.Resident, cfg.Duration)
	}
	res := &OvercommitResult{Resident: cfg.Resident, Seconds: cfg.Duration.Seconds()}
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
func overcommit(a, b datapath.Place, n int, cfg OvercommitConfig) (*OvercommitRow, error) {
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
	acfg := amii.Config{Spin: -1, QueueEntries: 16, StagingSize: 8192, MediumSlots: -1}
	vnet := func(i int, peer nicfw.HostID) amii.VNet {
		return amii.VNet{ID: nicfw.EndpointID(i + 1), Tag: amiiTag + uint64(i), Table: []amii.Name{{Host: peer, Endpoint: nicfw.EndpointID(i + 1)}}}
	}
	clients, servers := make([]*amii.Endpoint, n), make([]*amii.Endpoint, n)
	defer func() {
		for _, e := range append(clients, servers...) {
			if e != nil {
				e.Close()
			}
		}
	}()
	for i := range n {
		if servers[i], err = amii.Dial(hosts[1].sock, vnet(i, amiiHostA), acfg); err != nil {
			return nil, fmt.Errorf("server endpoint %d: %w", i+1, err)
		}
		if clients[i], err = amii.Dial(hosts[0].sock, vnet(i, amiiHostB), acfg); err != nil {
			return nil, fmt.Errorf("client endpoint %d: %w", i+1, err)
		}
	}
	before, err := hosts[1].d.Stats()
	if err != nil {
		return nil, err
	}
	var stop, measuring atomic.Bool
	errs := make([]error, 2*n)
	counts := make([]int, n)
	var wg sync.WaitGroup
	for i, s := range servers {
		var handlerErr error
		if err := s.Handle(1, func(t *amii.Token, args []uint64) {
			if err := t.Reply(2, args...); err != nil && handlerErr == nil {
				handlerErr = err
			}
		}); err != nil {
			return nil, err
		}
		wg.Go(func() {
			for !stop.Load() && handlerErr == nil {
				if _, err := s.Wait(50 * time.Millisecond); err != nil {
					errs[i] = err
					return
				}
				if _, err := s.Poll(); err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = handlerErr
		})
	}
	for i, c := range clients {
		if err := c.Handle(2, func(*amii.Token, []uint64) {
			if measuring.Load() {
				counts[i]++
			}
		}); err != nil {
			return nil, err
		}
		wg.Go(func() {
			for !stop.Load() {
				if c.Outstanding() == 0 {
					if err := c.Request(0, 1, uint64(i)); err != nil {
						errs[n+i] = err
						return
					}
				}
				if _, err := c.Wait(50 * time.Millisecond); err != nil {
					errs[n+i] = err
					return
				}
				if _, err := c.Poll(); err != nil {
					errs[n+i] = err
					return
				}
			}
		})
	}
	// Let every virtual network make its first round trip (its endpoints'
	// first faults), then measure.
	time.Sleep(cfg.Duration / 4)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(cfg.Duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	after, err := hosts[1].d.Stats()
	if err != nil {
		return nil, err
	}
	row := &OvercommitRow{Endpoints: n,
		Faults: after.Residency.Faults - before.Residency.Faults, NACKs: after.Engine.NotResident - before.Engine.NotResident}
	rates := make([]float64, n)
	for i, c := range counts {
		rates[i] = float64(c) / elapsed.Seconds()
	}
	row.PerClient, row.MinClient, row.MaxClient, row.Rate = spread(rates)
	return row, nil
}

// Markdown writes the overcommit table.
func (r *OvercommitResult) Markdown(w io.Writer) error {
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
func (r *OvercommitResult) Figures() []Figure {
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

// Plot draws the server's and the average client's rates against the
// overcommit factor into dir as overcommit.png and .svg.
func (r *OvercommitResult) Plot(dir string) ([]string, error) {
	var srv, per plotter.XYs
	for _, x := range r.Rows {
		srv = append(srv, plotter.XY{X: float64(x.Factor), Y: x.Rate})
		per = append(per, plotter.XY{X: float64(x.Factor), Y: x.PerClient})
	}
	return plotLines(dir, "overcommit", fmt.Sprintf("AM-II: virtual networks on %d endpoint frames", r.Resident),
		"overcommit factor (endpoints per frame, log scale)", "messages per second", true, []line{{"server", srv}, {"per client", per}})
}
