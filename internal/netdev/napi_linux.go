package netdev

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// ErrForeignSysfs: /sys/class/net shows another network namespace's
// devices (sysfs shows the namespace that mounted it), so a device of the
// caller's cannot be tuned through it.
var ErrForeignSysfs = errors.New("sysfs shows another network namespace's devices")

// TuneNAPI sets dev's napi_defer_hard_irqs and gro_flush_timeout for
// preferred busy polling (TunedDeferHardIRQs, TunedGROFlushTimeout), in
// the caller's network namespace, and returns the function that puts the
// values found back. It refuses (ErrForeignSysfs) when sysfs shows
// another namespace's device of that name: run it where sysfs is the
// device's (`ip netns exec` mounts one).
func TuneNAPI(dev string) (restore func() error, err error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, err
	}
	if readSysfs(dev, "ifindex") != strconv.Itoa(ifc.Index) {
		return nil, fmt.Errorf("netdev: tuning %s: %w (run it under `ip netns exec`, which mounts the namespace's own)", dev, ErrForeignSysfs)
	}
	set := func(attr, v string) error {
		if err := os.WriteFile(filepath.Join("/sys/class/net", dev, attr), []byte(v), 0); err != nil {
			return fmt.Errorf("netdev: setting %s's %s to %s: %w", dev, attr, v, err)
		}
		return nil
	}
	oldDefer, oldFlush := readSysfs(dev, "napi_defer_hard_irqs"), readSysfs(dev, "gro_flush_timeout")
	if oldDefer == "" || oldFlush == "" {
		return nil, fmt.Errorf("netdev: %s has no napi_defer_hard_irqs or gro_flush_timeout in sysfs", dev)
	}
	restore = func() error {
		return errors.Join(set("napi_defer_hard_irqs", oldDefer), set("gro_flush_timeout", oldFlush))
	}
	if err := errors.Join(set("napi_defer_hard_irqs", strconv.Itoa(TunedDeferHardIRQs)),
		set("gro_flush_timeout", strconv.FormatInt(TunedGROFlushTimeout.Nanoseconds(), 10))); err != nil {
		return nil, errors.Join(err, restore())
	}
	return restore, nil
}
