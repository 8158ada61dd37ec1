package datapath

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netdev"
)

// The AF_XDP bind mode. Open and OpenConfig bind their sockets in the
// mode SetZeroCopy set for the process (a command's --zerocopy):
//
//   - auto (the default): zero-copy where the driver has it, else copy
//     mode, and the refusal is kept (XSKInUse) for the JSON and the report
//     of the run, so that a fallback is never silent;
//   - require: zero-copy or Open fails, saying why;
//   - off: copy mode.
//
// XSKInUse sums up the sockets the process opened, for the records of
// the run: one mode, or "mixed".

// xsk is the process's mode and what its sockets got.
var xsk struct {
	sync.Mutex
	mode           afxdp.Mode
	busyPoll       time.Duration // SetBusyPoll: 0 the socket's default, negative off
	zeroCopy, copy int
	why            string // the first fallback's reason, or why copy mode
}

// ZeroCopyPolicies are the names --zerocopy takes, in the order of
// afxdp's modes: auto, off (copy) and require (zero-copy).
var ZeroCopyPolicies = map[string]afxdp.Mode{"auto": afxdp.ModeAuto, "off": afxdp.ModeCopy, "require": afxdp.ModeZeroCopy}

// ParseZeroCopy returns the mode a --zerocopy value names.
func ParseZeroCopy(s string) (afxdp.Mode, error) {
	m, ok := ZeroCopyPolicies[s]
	if !ok {
		return 0, fmt.Errorf("--zerocopy %q: want auto, require or off", s)
	}
	return m, nil
}

// policyName is the --zerocopy name of m.
func policyName(m afxdp.Mode) string {
	for name, v := range ZeroCopyPolicies {
		if v == m {
			return name
		}
	}
	return m.String()
}

// SetZeroCopy sets the bind mode of the sockets the process opens from
// now on, and starts XSKInUse's summary afresh: a command calls it once,
// before it opens any.
func SetZeroCopy(m afxdp.Mode) {
	xsk.Lock()
	defer xsk.Unlock()
	xsk.mode, xsk.zeroCopy, xsk.copy, xsk.why = m, 0, 0, ""
}

// SetBusyPoll sets the busy-polling time of the sockets the process
// opens from now on (afxdp.Options.BusyPoll, with preferred busy polling):
// 0 leaves afxdp's default, a negative time turns it off (NoBusyPoll).
func SetBusyPoll(d time.Duration) {
	xsk.Lock()
	defer xsk.Unlock()
	xsk.busyPoll = d
}

// socketOptions returns the options of a socket on queue, in the modes
// the process set.
func socketOptions(queue int) afxdp.Options {
	xsk.Lock()
	defer xsk.Unlock()
	o := afxdp.Options{Queue: queue, Mode: xsk.mode}
	switch {
	case xsk.busyPoll < 0:
		o.NoBusyPoll = true
	case xsk.busyPoll > 0:
		o.BusyPoll = xsk.busyPoll
	}
	return o
}

// XSKUse is what XSKInUse reports.
type XSKUse struct {
	// Policy is the --zerocopy in force: auto, require or off.
	Policy string `json:"zerocopy"`
	// Mode is the sockets' mode: zero-copy, copy, mixed, or "" if none
	// was opened.
	Mode string `json:"xsk_mode"`
	// Why says why copy mode, where it is: the driver's refusal of
	// zero-copy (auto) or the policy (off).
	Why string `json:"xsk_mode_why,omitempty"`
}

// XSKInUse sums up the sockets Open and OpenConfig opened in this
// process.
func XSKInUse() XSKUse {
	xsk.Lock()
	defer xsk.Unlock()
	u := XSKUse{Policy: policyName(xsk.mode), Why: xsk.why}
	switch {
	case xsk.zeroCopy > 0 && xsk.copy > 0:
		u.Mode = "mixed"
	case xsk.zeroCopy > 0:
		u.Mode = "zero-copy"
	case xsk.copy > 0:
		u.Mode = "copy"
	}
	return u
}

// noZeroCopy is why a socket on dev is bound in copy mode without trying
// zero-copy in auto mode: the driver does not offer it, as the kernel's
// netdev family says ("" when it offers it, or the kernel cannot say: the
// bind then tries).
func noZeroCopy(dev string) string {
	d, err := netdev.Describe(dev)
	if err != nil || !d.FeaturesKnown || d.XDPFeatureSet&netdev.XDPXSKZeroCopy != 0 {
		return ""
	}
	return fmt.Sprintf("%s's driver (%s) has no AF_XDP zero-copy (netdev xdp-features)", dev, d.Driver)
}

// noteXSK records the mode of a socket opened on dev; why, if not "", is
// why it was bound in copy mode (noZeroCopy).
func noteXSK(dev string, info afxdp.Info, why string) {
	xsk.Lock()
	defer xsk.Unlock()
	if info.ZeroCopy {
		xsk.zeroCopy++
		return
	}
	xsk.copy++
	if xsk.why != "" {
		return
	}
	switch {
	case why != "":
		xsk.why = why
	case info.ZeroCopyErr != nil:
		xsk.why = fmt.Sprintf("%s refused zero-copy: %v", dev, info.ZeroCopyErr)
	case info.Options.Mode == afxdp.ModeCopy:
		xsk.why = "--zerocopy off"
	}
}

// zeroCopyError explains a socket on p's device that could not bind in
// zero-copy mode when the policy requires it.
func zeroCopyError(p Place, err error) error {
	if !errors.Is(err, afxdp.ErrNotSupported) {
		return err
	}
	dev, doctor := devName(p), "xam doctor --dev "+devName(p)
	if p.Netns != "" {
		doctor += " --netns " + p.Netns
		dev += " (in network namespace " + p.Netns + ")"
	}
	return fmt.Errorf("zero-copy required (--zerocopy require), and device %s refuses it: %w; "+
		"`%s` shows what its driver offers, and --zerocopy auto runs in copy mode, saying so", dev, err, doctor)
}
