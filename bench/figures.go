package bench

import (
	"fmt"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The report's figures of each experiment: the numbers of its tables that
// the paper reported (or that stand for what it reported in words),
// beside the paper's and today's peers. Each method takes what a run
// measured, an interrupted one's too, and leaves out what it lacks.
// paperFig and noteFig copy the peers they are given before setting their
// ratios, so one slice of peers may serve several figures (the AM-II
// bandwidth classes, incast's configurations) without one figure's
// ratios overwriting another's.

// numbersLost is the paper note of a figure whose value the source text
// available to the project lost (figures and most numbers were stripped
// from the SSAM text; the AM-II text is word-stemmed).
const numbersLost = "in the paper's table; its value is not in the source text"

// peersFrom returns the peers among m's paths, in the order given:
// keyName holds pairs of a path's key in m and the peer's name.
func peersFrom(m map[string]float64, keyName ...string) []Peer {
	var peers []Peer
	for i := 0; i+1 < len(keyName); i += 2 {
		if v, ok := m[keyName[i]]; ok {
			peers = append(peers, peer(keyName[i+1], v))
		}
	}
	return peers
}

// Figures returns SSAM's figures: the round trip and bulk bandwidth of the
// abstract beside raw AF_XDP and the kernel's paths, and the traps' costs
// beside the system-call path's.
func (t *ssamTablesResult) Figures() []Figure {
	var figs []Figure
	rtt := map[string]float64{}
	for _, r := range t.RTT {
		rtt[r.Path] = float64(r.RTT.P50) / 1e3
	}
	if v, ok := rtt["ssam"]; ok {
		peers := peersFrom(rtt, "raw", "raw AF_XDP", "udp", "kernel UDP", "tcp", "kernel TCP", "packet", "AF_PACKET")
		figs = append(figs, paperFig("round trip, small message, p50", "µs", t.Paper.RTTMicros, v, peers...))
	}
	bw := map[string]float64{}
	for _, r := range t.Bandwidth {
		bw[r.Path] = r.MBPerSec
	}
	if v, ok := bw["ssam"]; ok {
		figs = append(figs, paperFig("bulk write bandwidth", "MB/s", t.Paper.BulkMBPerSec, v, peersFrom(bw, "tcp", "kernel TCP", "udp", "kernel UDP")...))
	}
	sys := map[string]float64{}
	for _, c := range t.Syscalls {
		sys[c.Op] = c.NsPerCall
	}
	for _, c := range t.Traps {
		if c.Op == "null_syscall" {
			continue
		}
		var peers []Peer
		if v, ok := sys[c.Op]; ok {
			peers = append(peers, peer("AF_PACKET system call", v))
		}
		figs = append(figs, noteFig("trap: "+c.Op, "ns", numbersLost, c.NsPerCall, peers...))
	}
	for _, c := range t.AM {
		figs = append(figs, noteFig("AM layer: "+c.Op, "ns", numbersLost, c.NsPerCall))
	}
	return figs
}

// Figures returns AM-II's LogP figures: the round trip of the abstract
// (42 µs) and each parameter of the default configuration, with the
// baseline's beside it (the incremental cost of reliability and
// protection), and the contention experiment's slope.
func (r *logpResult) Figures() []Figure {
	var figs []Figure
	row := func(name string) *logpRowResult {
		for i := range r.Rows {
			if r.Rows[i].Config == name {
				return &r.Rows[i]
			}
		}
		return nil
	}
	def, base := row("+protection"), row("baseline")
	if def != nil {
		var peers []Peer
		if base != nil {
			peers = append(peers, peer("baseline (unreliable, unprotected)", base.RTT))
		}
		if rel := row("+reliability"); rel != nil {
			peers = append(peers, peer("+reliability", rel.RTT))
		}
		if r.UCX != nil {
			peers = append(peers, r.UCX.Peer())
		}
		figs = append(figs, paperFig("round trip, short message (reliable, protected)", "µs", 42, def.RTT, peers...))
		for _, p := range []struct {
			name string
			v    func(*logpRowResult) float64
		}{{"Os", func(x *logpRowResult) float64 { return x.Os }}, {"Or", func(x *logpRowResult) float64 { return x.Or }}, {"g", func(x *logpRowResult) float64 { return x.G }}} {
			var peers []Peer
			if base != nil {
				peers = append(peers, peer("baseline", p.v(base)))
			}
			figs = append(figs, noteFig("LogP "+p.name+" (reliable, protected)", "µs", numbersLost, p.v(def), peers...))
		}
	}
	if b := row("+batching"); b != nil && def != nil {
		figs = append(figs, noteFig("LogP g, pipelined and batched", "µs", "not in the paper (xam's coalescing)", b.G, peer("one at a time", def.G)))
	}
	if n := len(r.Contention); n > 0 {
		first, last := r.Contention[0], r.Contention[n-1]
		figs = append(figs, noteFig(fmt.Sprintf("aggregate message rate, %d clients to one server", last.Clients), "msgs/s",
			"within the peak 1/g; per-client rate the fair share", last.Aggregate, peer(fmt.Sprintf("%d client", first.Clients), first.Aggregate)))
		if last.Clients > first.Clients {
			slope := (last.RTT - first.RTT) / float64(last.Clients-first.Clients)
			var peers []Peer
			if def != nil {
				peers = append(peers, peer("LogP g", def.G))
			}
			figs = append(figs, noteFig("round trip slope per added client", "µs", "equal to the gap g", slope, peers...))
		}
	}
	return figs
}

// Figures returns AM-II's bandwidth figures: the best of each class
// beside the paper's 31 MB/s and today's peers on the same link.
func (r *amiiBandwidthResult) Figures() []Figure {
	var peers []Peer
	if r.Raw != nil {
		peers = append(peers, peer("raw AF_XDP frames", r.Raw.MBPerSec))
	}
	if r.TCP != nil {
		peers = append(peers, peer("kernel TCP", r.TCP.MBPerSec))
	}
	if r.UCX != nil {
		peers = append(peers, r.UCX.Peer())
	}
	var figs []Figure
	for _, class := range []string{"short", "medium", "bulk"} {
		best, size, lo, hi := 0.0, 0, 0, 0
		for _, x := range r.Rows {
			if x.Class != class {
				continue
			}
			if lo == 0 || x.Size < lo {
				lo = x.Size
			}
			hi = max(hi, x.Size)
			if x.MBPerS > best {
				best, size = x.MBPerS, x.Size
			}
		}
		if size == 0 {
			continue
		}
		// The sizes measured name the figure, not the best of them, which
		// may differ from run to run.
		name := fmt.Sprintf("node-to-node bandwidth, %s messages (the best of %d–%d B)", class, lo, hi)
		if class == "bulk" {
			figs = append(figs, paperFig(name, "MB/s", 31, best, peers...))
			continue
		}
		figs = append(figs, noteFig(name, "MB/s", "31 MB/s peak (bulk)", best, peers...))
	}
	return figs
}

// Figures returns the incast figures for the most senders at the largest
// message size measured: each configuration's goodput as a share of one
// sender's, coordination's beside no coordination's and kernel TCP's.
func (r *incastResult) Figures() []Figure {
	most, size := 0, 0
	for _, p := range r.Points {
		most = max(most, p.Senders)
	}
	for _, p := range r.Points {
		if p.Senders == most {
			size = max(size, p.Size)
		}
	}
	get := func(config string) (incastPointRow, bool) {
		for _, p := range r.Points {
			if p.Config == config && p.Senders == most && p.Size == size {
				return p, true
			}
		}
		return incastPointRow{}, false
	}
	var figs []Figure
	on, okOn := get("on")
	off, okOff := get("off")
	tcp, okTCP := get("tcp")
	etr, okETR := get("on+etr")
	var peers []Peer
	if okOff {
		peers = append(peers, peer("no coordination", off.Ratio))
	}
	if okTCP {
		peers = append(peers, peer("kernel TCP", tcp.Ratio))
	}
	name := fmt.Sprintf("goodput of %d senders at %d B over one sender's", most, size)
	if okOn {
		figs = append(figs, noteFig(name+", coordinated", "ratio", "a large fraction of link bandwidth; loss under 0.1%", on.Ratio, peers...))
	}
	if okOff {
		figs = append(figs, noteFig(name+", no coordination", "ratio", "nearly zero above ~600-byte messages (2-3 senders)", off.Ratio))
	}
	if okETR {
		figs = append(figs, noteFig(name+", early token release", "ratio", "two senders close to one", etr.Ratio, peers...))
	}
	if okOn {
		var drops []Peer
		if okOff {
			drops = append(drops, peer("no coordination", float64(off.Drops)))
		}
		figs = append(figs, noteFig(fmt.Sprintf("switch drops, %d senders at %d B, coordinated", most, size), "frames", "loss under 0.1%", float64(on.Drops), drops...))
	}
	return figs
}

// Figures returns GRIM's figures beside the paper's.
func (r *grimBenchResult) Figures() []Figure {
	var figs []Figure
	var inline *enginePing
	var peers []Peer
	for i, p := range r.Peers {
		if p.Name == "grim inline" {
			inline = &r.Peers[i]
			continue
		}
		peers = append(peers, peer(p.Name, p.P50))
	}
	if inline != nil {
		figs = append(figs, paperFig("host-to-host round trip, short message, p50", "µs", 13, inline.P50, peers...))
	}
	if n := len(r.Channels); n > 1 {
		last := r.Channels[n-1]
		figs = append(figs, noteFig(fmt.Sprintf("round trip with %d logical channels over 1", last.Channels), "ratio", "nearly flat for few channels", last.Ratio))
	}
	for _, g := range r.Gap {
		switch g.Burst {
		case 100:
			figs = append(figs, noteFig("gap, burst of 100", "µs/msg", "negligible under 200", g.Injected))
		case 1000, 2000:
			figs = append(figs, paperFig(fmt.Sprintf("gap, burst of %d (answered)", g.Burst), "µs/msg", 20, g.Answered))
		}
	}
	for _, b := range r.Bandwidth {
		if b.Size != 48<<10 {
			continue
		}
		var peers []Peer
		peers = append(peers, peer("store-and-forward", b.StoreForward))
		if r.TCP48K != nil {
			peers = append(peers, peer("kernel TCP, 48 KB writes", r.TCP48K.MBPerSec))
		}
		figs = append(figs, paperFig("bandwidth, 48 KB, cut-through", "MB/s", 106, b.CutThrough, peers...))
		figs = append(figs, paperFig("bandwidth, 48 KB, store-and-forward", "MB/s", 74, b.StoreForward))
	}
	if len(r.Storage) == 2 {
		figs = append(figs, paperFig("host to storage endpoint, p50", "µs", 21, r.Storage[1].P50, peer("host to host, firmware mode", r.Storage[0].P50)))
	}
	inj := map[string]float64{}
	for _, c := range r.Injection {
		inj[c.Op] = c.NsPerCall
	}
	if v, ok := inj["grim_short"]; ok {
		figs = append(figs, paperFig("injection overhead, one short message", "ns", 1000, v, peersFrom(inj, "send", "SSAM send trap")...))
	}
	return figs
}

// charts gives SSAM's round-trip distributions of raw AF_XDP, SSAM, UDP
// and TCP, with SSAM's 1994 round trip for reference (ssam-rtt).
func (t *ssamTablesResult) charts() []chart {
	names := map[string]string{"raw": "raw AF_XDP", "ssam": "SSAM", "udp": "kernel UDP", "tcp": "kernel TCP"}
	size := ssamMessage
	if len(t.RTT) > 0 {
		size = t.RTT[0].Size
	}
	c := chart{name: "ssam-rtt", kind: cdfChart, title: fmt.Sprintf("Round trips of %d-byte messages on one lab (%d per run)", size, t.Count),
		xLabel: "round trip (µs, log scale)", yLabel: "fraction of round trips ≤ x",
		marks: []ref{{name: fmt.Sprintf("SSAM 1994 (~%g µs)", t.Paper.RTTMicros), v: measure(t.Paper.RTTMicros)}}}
	for _, path := range []string{"raw", "ssam", "udp", "tcp"} {
		c.series = append(c.series, series{name: names[path], hists: []*hdrhistogram.Histogram{t.hists[path]}})
	}
	return []chart{c}
}

// charts gives the contention experiment: aggregate and per-client
// message rates against clients (logp-contention).
func (r *logpResult) charts() []chart {
	var xs, agg, per, cx, co []float64
	for _, c := range r.Contention {
		xs = append(xs, float64(c.Clients))
		agg, per = append(agg, c.Aggregate), append(per, c.PerClient)
		if c.Coalesced > 0 {
			cx, co = append(cx, float64(c.Clients)), append(co, c.Coalesced)
		}
	}
	return []chart{{name: "logp-contention", title: "AM-II: n clients, one server endpoint", xLabel: "clients", yLabel: "messages per second",
		series: []series{xy("aggregate", xs, agg), xy("per client", xs, per), xy("aggregate, coalesced", cx, co)}}}
}

// charts gives bandwidth against message size, a line per class, with
// the peers as reference lines (amii-bandwidth).
func (r *amiiBandwidthResult) charts() []chart {
	c := chart{name: "amii-bandwidth", title: "AM-II bandwidth against message size", xLabel: "message size (bytes, log scale)", yLabel: "MB/s",
		logX: true, xBytes: true}
	for _, class := range []string{"short", "medium", "bulk"} {
		var xs, ys []float64
		for _, x := range r.Rows {
			if x.Class == class {
				xs, ys = append(xs, float64(x.Size)), append(ys, x.MBPerS)
			}
		}
		c.series = append(c.series, xy("AM-II "+class, xs, ys))
	}
	if r.Raw != nil {
		c.refs = append(c.refs, ref{fmt.Sprintf("raw AF_XDP frames, %d B", r.Raw.Message), measure(r.Raw.MBPerSec)})
	}
	if r.TCP != nil {
		c.refs = append(c.refs, ref{fmt.Sprintf("kernel TCP, %s writes", xLabel(float64(r.TCP.Message), true)), measure(r.TCP.MBPerSec)})
	}
	if u := r.UCX; u != nil && u.Missing == "" {
		c.refs = append(c.refs, ref{fmt.Sprintf("UCX AM over TCP, %s", xLabel(float64(u.Size), true)), measure(u.MBPerS)})
	}
	return []chart{c}
}
