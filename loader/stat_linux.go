package loader

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// CountersOn reads the counters of the xam XDP program attached to the
// device ifindex (in the calling thread's network namespace), whichever
// process attached it: it finds the program through the device, and the
// program's counters map through the program.
func CountersOn(ifindex int) (Counters, error) {
	var c Counters
	err := withMapOn(ifindex, xamMapStats, func(m *ebpf.Map) (err error) {
		c, err = readCounters(m)
		return err
	})
	return c, err
}

// QueueCountersOn is QueueCounters of xam's program attached to device
// ifindex, from any process, as CountersOn.
func QueueCountersOn(ifindex int) ([]QueueCount, error) {
	var qs []QueueCount
	err := withMapOn(ifindex, xamMapQueueStats, func(m *ebpf.Map) (err error) {
		qs, err = readQueueCounters(m)
		return err
	})
	return qs, err
}

// withMapOn calls f with the map called name of xam's program attached
// to device ifindex.
func withMapOn(ifindex int, name string, f func(*ebpf.Map) error) error {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("loader: device %d: %w", ifindex, err)
	}
	x := link.Attrs().Xdp
	if x == nil || x.ProgId == 0 {
		return fmt.Errorf("%w: %s has no XDP program", ErrNotXam, link.Attrs().Name)
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err != nil {
		return fmt.Errorf("loader: program %d on %s: %w", x.ProgId, link.Attrs().Name, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("loader: program %d: %w", x.ProgId, err)
	}
	if info.Name != xamProgXamXdp && info.Name != xamProgXamXdpFrags && info.Name != xamProgXamXdpMeta {
		return fmt.Errorf("%w: %s runs %q (id %d)", ErrNotXam, link.Attrs().Name, info.Name, x.ProgId)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err == nil && mi.Name == name {
			err := f(m)
			m.Close()
			return err
		}
		m.Close()
	}
	return fmt.Errorf("%w: program %d on %s has no %q map", ErrNotXam, x.ProgId, link.Attrs().Name, name)
}
