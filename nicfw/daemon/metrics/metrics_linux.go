//go:build linux

package metrics

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/mapper"
	"github.com/xam-project/xam/nicfw/transport"
)

// Sources are what a Collector reads at every scrape. Each is called from
// the scraping goroutine, so each must be safe to call while the daemon
// runs: Daemon.Stats, loader.Program.Counters and afxdp.Socket.Stats are.
type Sources struct {
	// Stats returns the daemon's snapshot (Daemon.Stats). Required.
	Stats func() (daemon.Stats, error)
	// XDP returns the XDP program's counters (loader.Program.Counters);
	// nil: not exported.
	XDP func() (loader.Counters, error)
	// Socket returns the AF_XDP socket's counters and XDP_STATISTICS
	// (afxdp.Socket.Stats); nil: not exported.
	Socket func() (afxdp.Stats, error)
}

// ErrNoStats: New was given no Sources.Stats.
var ErrNoStats = errors.New("metrics: no daemon statistics to read")

// Collector is a prometheus.Collector of a daemon's metrics. See the
// package documentation.
type Collector struct {
	src Sources

	endpoint endpointDescs
	peer     peerDescs
	daemon   daemonDescs

	engine, transport, residency, backplane, mapper, xdp, xsk *structFamily
}

// New returns a Collector of src's metrics.
func New(src Sources) (*Collector, error) {
	if src.Stats == nil {
		return nil, ErrNoStats
	}
	c := &Collector{src: src, endpoint: newEndpointDescs(), peer: newPeerDescs(), daemon: newDaemonDescs()}
	c.engine = newStructFamily(nicfw.EngineStats{}, "xam_engine", "The engine's counter %s (nicfw.EngineStats).", map[string]override{
		"Polls":     {help: "Engine loops run: with xam_engine_busy_polls_total, the share of them that found work."},
		"BusyPolls": {help: "Engine loops that found work (sent, received, acknowledged or returned something)."},
		"Busy":      {name: "sends_busy", help: "Sends put off because every channel to their host was in use (nicfw.EngineStats.Busy)."},
	})
	c.transport = newStructFamily(transport.Stats{}, "xam_transport", "The transport's counter %s, all peers together (transport.Stats).", map[string]override{
		"NotForUs":     {name: "frames_for_others", help: "Frames addressed to another MAC, dropped (transport.Stats.NotForUs)."},
		"RxStampLagNs": {name: "rx_stamp_lag", help: "Nanoseconds from the NIC's receive stamps to the transport's taking the frames, summed over the stamped frames (transport.Stats.RxStampLagNs; over xam_transport_rx_stamped_total: the mean)."},
	})
	c.residency = newStructFamily(nicfw.ResidencyStats{}, "xam_residency", "The endpoint residency's counter %s (nicfw.ResidencyStats).", nil)
	c.backplane = newStructFamily(nicfw.ModuleStats{}, "xam_modules", "What the engine did for its modules: %s (nicfw.ModuleStats).", nil)
	c.mapper = newStructFamily(mapper.Stats{}, "xam_mapper", "The mapper's counter %s (mapper.Stats).", nil)
	c.xdp = newStructFamily(loader.Counters{}, "xam_xdp", "The XDP program's counter %s, summed over CPUs (loader.Counters).", nil)
	kernel := map[string]override{}
	for _, f := range []string{"RxDropped", "RxInvalidDescs", "TxInvalidDescs", "RxRingFull", "RxFillRingEmptyDescs", "TxRingEmptyDescs"} {
		kernel[f] = override{help: fmt.Sprintf("The AF_XDP socket's counter %s, from the kernel's XDP_STATISTICS (afxdp.Stats).", f)}
	}
	c.xsk = newStructFamily(afxdp.Stats{}, "xam_xsk", "The AF_XDP socket's counter %s, counted in user space (afxdp.Stats).", kernel)
	return c, nil
}

// families returns the Collector's families of struct counters.
func (c *Collector) families() []*structFamily {
	return []*structFamily{c.engine, c.transport, c.residency, c.backplane, c.mapper, c.xdp, c.xsk}
}

// Describe implements prometheus.Collector: every metric the Collector
// may send.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.endpoint.describe(ch)
	c.peer.describe(ch)
	c.daemon.describe(ch)
	for _, f := range c.families() {
		f.describe(ch)
	}
}

// Collect implements prometheus.Collector: it reads the sources once each
// and sends their metrics. A source that fails sends an invalid metric
// with its error, and the others' are sent all the same.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if s, err := c.src.Stats(); err != nil {
		ch <- prometheus.NewInvalidMetric(c.daemon.endpoints, fmt.Errorf("reading the daemon's statistics: %w", err))
	} else {
		c.collectDaemon(ch, &s)
	}
	if c.src.XDP != nil {
		if x, err := c.src.XDP(); err != nil {
			ch <- prometheus.NewInvalidMetric(c.xdp.descs[0], fmt.Errorf("reading the XDP program's counters: %w", err))
		} else {
			c.xdp.collect(ch, x)
		}
	}
	if c.src.Socket != nil {
		if x, err := c.src.Socket(); err != nil {
			ch <- prometheus.NewInvalidMetric(c.xsk.descs[0], fmt.Errorf("reading the AF_XDP socket's counters: %w", err))
		} else {
			c.xsk.collect(ch, x)
		}
	}
}

// collectDaemon sends the metrics of the daemon's snapshot s.
func (c *Collector) collectDaemon(ch chan<- prometheus.Metric, s *daemon.Stats) {
	c.daemon.collect(ch, s)
	c.engine.collect(ch, s.Engine)
	c.transport.collect(ch, s.Transport)
	c.residency.collect(ch, s.Residency)
	if s.Backplane != nil {
		c.backplane.collect(ch, *s.Backplane)
	}
	if s.Mapper != nil {
		c.mapper.collect(ch, *s.Mapper)
	}
	for _, m := range s.Modules {
		for _, v := range m.Counters {
			gauge(ch, c.daemon.module, float64(v.Value), m.Name, v.Name)
		}
	}
	for i := range s.List {
		c.endpoint.collect(ch, &s.List[i])
	}
	for i := range s.Peers {
		c.peer.collect(ch, &s.Peers[i])
	}
}

// id spells an endpoint's or a host's id as a label value.
func id[T ~uint16](v T) string { return strconv.Itoa(int(v)) }

// reasonLabels are the label values of the engine's reasons of return
// (endpoint.Reason), by reason; "other" counts a reason out of range.
var reasonLabels = [endpoint.NumReasons]string{
	0:                          "other",
	endpoint.ReasonBadTag:      "bad_tag",
	endpoint.ReasonNoEndpoint:  "no_endpoint",
	endpoint.ReasonUnreachable: "unreachable",
	endpoint.ReasonNoHost:      "no_host",
	endpoint.ReasonTooLarge:    "too_large",
	endpoint.ReasonClosed:      "closed",
	endpoint.ReasonRange:       "range",
	endpoint.ReasonIncomplete:  "incomplete",
	endpoint.ReasonRestarted:   "restarted",
	endpoint.ReasonNoHandler:   "no_handler",
	endpoint.ReasonNoReply:     "no_reply",
}

// refusalLabels are the label values of the reasons a descriptor is
// refused (endpoint.Refusal).
var refusalLabels = [endpoint.NumRefusals]string{
	endpoint.RefusedClass:       "class",
	endpoint.RefusedArgs:        "args",
	endpoint.RefusedDestination: "destination",
	endpoint.RefusedLength:      "length",
	endpoint.RefusedRange:       "range",
	endpoint.RefusedRing:        "ring",
	endpoint.RefusedFlags:       "flags",
}

// queueLabels are the label values of an endpoint's queues.
var queueLabels = [4]string{
	endpoint.RequestSend: "request_send", endpoint.ReplySend: "reply_send",
	endpoint.RequestReceive: "request_receive", endpoint.ReplyReceive: "reply_receive",
}

// sendReasons sends counts by reason of return as desc's metrics with the
// labels first and the reason: every reason the engine gives, at 0 too,
// and "other" (and the library's no_reply) only once they count.
func sendReasons(ch chan<- prometheus.Metric, desc *prometheus.Desc, counts *[endpoint.NumReasons]uint64, first string) {
	for r, n := range counts {
		if n == 0 && (r == 0 || endpoint.Reason(r) == endpoint.ReasonNoReply) {
			continue
		}
		counter(ch, desc, n, first, reasonLabels[r])
	}
}
