package mapper

import (
	"net"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
)

// ModuleID is the mapper module's number among an engine's modules.
const ModuleID = 1

// Module runs a Mapper inside a firmware engine, as one of its modules
// (nicfw.Module): the engine's first module, and the proof of its seam. It
// speaks the mapper protocol in broadcast frames on the engine's link
// (nicfw.LinkUser), runs on the engine's coarse timer and whenever mapper
// frames wait (nicfw.Ticker), and makes every table it adopts the engine's
// host table, this host's id included (Backplane.SetHosts).
type Module struct {
	cfg   Config
	link  afxdp.Link
	m     *Mapper
	bp    *nicfw.Backplane
	every time.Duration
	err   error // the last error of a Poll, for Stats' caller to log
}

// NewModule returns the mapper module with cfg. cfg.OnChange, if set, runs
// after the engine has taken each new table (or refused it: then the
// module's LastError says why).
func NewModule(cfg Config) *Module {
	every := cfg.ProbeInterval
	if every <= 0 {
		every = time.Second // the mapper's default
	}
	return &Module{cfg: cfg, every: every}
}

// Name returns "mapper".
func (m *Module) Name() string { return "mapper" }

// ID returns ModuleID.
func (m *Module) ID() uint8 { return ModuleID }

// UseLink takes the engine's link for mapper frames.
func (m *Module) UseLink(l afxdp.Link) { m.link = l }

// Init starts the mapper on the engine's link.
func (m *Module) Init(bp *nicfw.Backplane) error {
	m.bp = bp
	cfg := m.cfg
	user := cfg.OnChange
	cfg.OnChange = func(t Table) {
		m.apply(t)
		if user != nil {
			user(t)
		}
	}
	var err error
	m.m, err = New(m.link, cfg)
	return err
}

// apply makes table t the engine's host table.
func (m *Module) apply(t Table) {
	self := m.bp.Self()
	if h, ok := t.Lookup(m.link.HardwareAddr()); ok {
		self = nicfw.HostID(h.ID)
	}
	hosts := make(map[nicfw.HostID]net.HardwareAddr, len(t.Hosts))
	for _, h := range t.Hosts {
		hosts[nicfw.HostID(h.ID)] = h.MAC
	}
	m.err = m.bp.SetHosts(self, hosts)
}

// Tick runs the mapper once: it takes in the frames waiting and probes
// when its time has come. It runs again within a quarter of the probe
// interval.
func (m *Module) Tick(now time.Time) time.Time {
	if err := m.m.Poll(); err != nil {
		m.err = err
	}
	return now.Add(m.every / 4)
}

// Stats returns the mapper's counters.
func (m *Module) Stats() Stats { return m.m.Stats() }

// Table returns the mapper's current table.
func (m *Module) Table() Table { return m.m.Table() }

// LastError returns the last error of the mapper's Poll or of the engine
// refusing a table, nil for none.
func (m *Module) LastError() error { return m.err }

var (
	_ nicfw.LinkUser = (*Module)(nil)
	_ nicfw.Ticker   = (*Module)(nil)
)
