//go:build linux

package daemon

import (
	"net"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
)

// plainModule is a module with no capability.
type plainModule struct{ id uint8 }

func (m *plainModule) Name() string                { return "plain" }
func (m *plainModule) ID() uint8                   { return m.id }
func (m *plainModule) Init(*nicfw.Backplane) error { return nil }

// countingModule is a module that reports counters (nicfw.StatsReporter),
// and counts how often it was asked.
type countingModule struct {
	plainModule
	asked int64
}

func (m *countingModule) Name() string { return "counting" }

func (m *countingModule) ReportStats() []nicfw.ModuleCounter {
	m.asked++
	return []nicfw.ModuleCounter{{Name: "setting", Value: -1}, {Name: "asked", Value: m.asked}}
}

// TestStatsModules: the daemon's stats list the engine's modules in their
// order, with the counters of those that report them, taken in the engine
// thread at each call, and what the engine did for them; a daemon without
// modules lists none.
func TestStatsModules(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	hosts := map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}
	counting := &countingModule{plainModule: plainModule{id: 7}}
	d, _ := runDaemon(t, la, Config{Engine: nicfw.EngineConfig{Host: 1, Modules: []nicfw.Module{&plainModule{id: 9}, counting}}, Hosts: hosts})
	for want := int64(1); want <= 2; want++ {
		s, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Modules) != 2 || s.Modules[0].Name != "plain" || s.Modules[0].ID != 9 || s.Modules[0].Counters != nil ||
			s.Modules[1].Name != "counting" || s.Modules[1].ID != 7 || len(s.Modules[1].Counters) != 2 ||
			s.Modules[1].Counters[0] != (nicfw.ModuleCounter{Name: "setting", Value: -1}) ||
			s.Modules[1].Counters[1] != (nicfw.ModuleCounter{Name: "asked", Value: want}) || s.Backplane == nil {
			t.Fatalf("stats call %d: modules %+v, backplane %v", want, s.Modules, s.Backplane)
		}
	}

	lc, ld, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close(); ld.Close() })
	bare, _ := runDaemon(t, lc, Config{Engine: nicfw.EngineConfig{Host: 1}, Hosts: map[nicfw.HostID]net.HardwareAddr{2: ld.HardwareAddr()}})
	if s, err := bare.Stats(); err != nil || s.Modules != nil || s.Backplane != nil {
		t.Errorf("no modules: %v, modules %+v, backplane %v", err, s.Modules, s.Backplane)
	}
}
