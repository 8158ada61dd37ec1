//go:build linux

package daemon

import (
	"slices"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/datapath/encap"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/mapper"
	"github.com/xam-project/xam/nicfw/transport"
)

// Stats is a snapshot of the daemon's counters.
type Stats struct {
	Endpoints int `json:"endpoints"`
	// List is the open endpoints, with their counters and the
	// descriptors in their queues. Through the socket, a user other than
	// root and the daemon's sees the tag only of its own endpoints and of
	// the networks it made: the others' are 0.
	List []nicfw.EndpointInfo `json:"endpoint_list"`
	// Peers is the peer hosts of the host table and what was sent and
	// returned between them and this host.
	Peers []nicfw.PeerInfo `json:"peers"`
	// Networks are the virtual networks with endpoints here, with their
	// creators and grants: all of them for root and the daemon's user
	// (and Daemon.Stats), the peer's own for others.
	Networks    []Network `json:"networks,omitempty"`
	Connections int       `json:"connections"`
	// Refused counts the open requests, grants and connections refused.
	Refused uint64 `json:"refused"`
	Sleeps  uint64 `json:"sleeps"` // times the engine slept
	// BigReleased counts the large endpoints (16 MB and up) whose memory
	// was released off the engine's path once they closed.
	BigReleased uint64               `json:"big_released"`
	Engine      nicfw.EngineStats    `json:"engine"`
	Transport   transport.Stats      `json:"transport"`
	Residency   nicfw.ResidencyStats `json:"residency"`
	// Hosts is the host table, this host included; Epoch the mapper's
	// version of it (0: static, or no table yet).
	Hosts []Host `json:"hosts"`
	Epoch uint64 `json:"epoch,omitempty"`
	// Mapper counts the mapper's work (with Config.Map).
	Mapper *mapper.Stats `json:"mapper,omitempty"`
	// Modules lists the engine's modules (Config.Engine.Modules, and the
	// mapper's with Config.Map), with what those that count their work
	// report (nicfw.StatsReporter); Backplane counts what the engine did
	// for them. Both are absent without modules.
	Modules   []ModuleReport     `json:"modules,omitempty"`
	Backplane *nicfw.ModuleStats `json:"backplane,omitempty"`
	// Link is the daemon's AF_XDP socket: its device and queue, MTU and
	// mode; absent on another kind of link.
	Link *LinkInfo `json:"link,omitempty"`
}

// LinkInfo is what Stats says of the daemon's AF_XDP socket.
type LinkInfo struct {
	Device      string `json:"device"`
	Queue       int    `json:"queue"`
	MTU         int    `json:"mtu"`
	MultiBuffer bool   `json:"multi_buffer"`
	// XSKMode is zero-copy or copy; XSKWhy, in copy mode, why: the
	// driver's refusal of zero-copy, or copy mode asked for.
	XSKMode string `json:"xsk_mode"`
	XSKWhy  string `json:"xsk_mode_why,omitempty"`
	// Queues are the queues with a socket, with several (afxdp.Queues).
	Queues []int `json:"queues,omitempty"`
	// BusyPoll: preferred busy polling is in effect, on NAPI instance
	// NAPIID; BusyPollWhy says why not, where it was asked for.
	BusyPoll    bool   `json:"busy_poll"`
	NAPIID      uint32 `json:"napi_id,omitempty"`
	BusyPollWhy string `json:"busy_poll_why,omitempty"`
	// Encap is the UDP form's report, on a link that carries it
	// (package encap); nil for raw frames.
	Encap *encap.Report `json:"encap,omitempty"`
}

// linkInfo returns what Stats says of link, if it is an AF_XDP socket;
// copyWhy is Config.CopyWhy.
func linkInfo(link afxdp.Link, copyWhy string) *LinkInfo {
	s, ok := link.(interface{ Info() afxdp.Info })
	if !ok {
		return nil
	}
	i := s.Info()
	l := &LinkInfo{Device: i.Ifname, Queue: i.Queue, MTU: i.MTU, MultiBuffer: i.MultiBuffer, XSKMode: "copy"}
	l.BusyPoll, l.NAPIID = i.BusyPoll, i.NAPIID
	switch {
	case i.BusyPoll:
	case i.Options.NoBusyPoll:
		l.BusyPollWhy = "turned off (--busy-poll 0)"
	case i.BusyPollErr != nil:
		l.BusyPollWhy = i.BusyPollErr.Error()
	case i.NAPIID == 0:
		l.BusyPollWhy = "the queue has no NAPI instance (a veth's has none)"
	}
	if q, ok := link.(interface{ Sockets() []*afxdp.Socket }); ok {
		for _, s := range q.Sockets() {
			l.Queues = append(l.Queues, s.Info().Queue)
		}
	}
	if u, ok := link.(*encap.UDP); ok {
		r := u.Report()
		l.Encap = &r
	}
	switch {
	case i.ZeroCopy:
		l.XSKMode = "zero-copy"
	case copyWhy != "":
		l.XSKWhy = copyWhy
	case i.ZeroCopyErr != nil:
		l.XSKWhy = "zero-copy refused: " + i.ZeroCopyErr.Error()
	case i.Options.Mode == afxdp.ModeCopy:
		l.XSKWhy = "copy mode asked for (--zerocopy off)"
	}
	return l
}

// ModuleReport is a module of the daemon's engine and what it reports.
type ModuleReport struct {
	Name string `json:"name"`
	ID   uint8  `json:"id"`
	// Counters are the module's settings and counters, in its order
	// (nicfw.StatsReporter); absent for a module that reports none.
	Counters []nicfw.ModuleCounter `json:"counters,omitempty"`
}

// Host is an entry of the daemon's host table.
type Host struct {
	ID  nicfw.HostID `json:"id"`
	MAC string       `json:"mac"`
}

// Stats returns the daemon's counters. It may be called from any
// goroutine while Run runs.
func (d *Daemon) Stats() (Stats, error) {
	var s Stats
	err := d.do(func() { s = d.statsNow() })
	return s, err
}

func (d *Daemon) statsNow() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{
		Endpoints: d.eng.Endpoints(), Connections: len(d.conns), Refused: d.refused, Sleeps: d.sleeps, BigReleased: d.bigReleased.Load(),
		Engine: d.eng.Stats(), Transport: d.eng.TransportStats(), Residency: d.eng.ResidencyStats(),
		Epoch: d.epoch, List: d.eng.EndpointList(), Peers: d.eng.PeerList(), Networks: d.networksFor(&peer{privileged: true}),
		Link: linkInfo(d.link, d.cfg.CopyWhy),
	}
	for id, mac := range d.hosts {
		s.Hosts = append(s.Hosts, Host{ID: id, MAC: mac.String()})
	}
	slices.SortFunc(s.Hosts, func(a, b Host) int { return int(a.ID) - int(b.ID) })
	if d.mapper != nil {
		ms := d.mapper.Stats()
		s.Mapper = &ms
	}
	if mods := d.cfg.Engine.Modules; len(mods) > 0 {
		bp := d.eng.ModuleStats()
		s.Backplane = &bp
		for _, m := range mods {
			r := ModuleReport{Name: m.Name(), ID: m.ID()}
			if sr, ok := m.(nicfw.StatsReporter); ok {
				r.Counters = sr.ReportStats()
			}
			s.Modules = append(s.Modules, r)
		}
	}
	return s
}
