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
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return Counters{}, fmt.Errorf("loader: device %d: %w", ifindex, err)
	}
	x := link.Attrs().Xdp
	if x == nil || x.ProgId == 0 {
		return Counters{}, fmt.Errorf("%w: %s has no XDP program", ErrNotXam, link.Attrs().Name)
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err != nil {
		return Counters{}, fmt.Errorf("loader: program %d on %s: %w", x.ProgId, link.Attrs().Name, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return Counters{}, fmt.Errorf("loader: program %d: %w", x.ProgId, err)
	}
	if info.Name != xamProgXamXdp && info.Name != xamProgXamXdpFrags {
		return Counters{}, fmt.Errorf("%w: %s runs %q (id %d)", ErrNotXam, link.Attrs().Name, info.Name, x.ProgId)
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err == nil && mi.Name == xamMapStats {
			c, err := readCounters(m)
			m.Close()
			return c, err
		}
		m.Close()
	}
	return Counters{}, fmt.Errorf("%w: program %d on %s has no %q map", ErrNotXam, x.ProgId, link.Attrs().Name, xamMapStats)
}
