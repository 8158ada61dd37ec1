//go:build linux

package loader

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/internal/netdev"
	"golang.org/x/sys/unix"
)

// Attach attaches the program to the device ifindex through a bpf_link, in
// mode (ModeAuto: as RecommendMode says). ifindex is resolved in the
// network namespace of the calling OS thread: to attach inside another
// namespace, call Attach from a thread locked in it (runtime.LockOSThread,
// netns.Set); the Attachment may then be used and closed from anywhere.
//
// The program stays attached until Attachment.Close, Program.Close or the
// end of the process, whether or not the caller keeps the Attachment or the
// Program: the package holds them meanwhile.
//
// A device holds one XDP program: if another is attached (by a running
// process through a bpf_link, or the legacy way), Attach fails with an
// error matching ErrAttached that says what is attached and how to remove
// it.
func (p *Program) Attach(ifindex int, mode Mode) (*Attachment, error) {
	if ifindex < 1 {
		return nil, fmt.Errorf("loader: invalid ifindex %d", ifindex)
	}
	reason := "requested"
	auto := mode == ModeAuto
	if auto {
		m, why, err := RecommendMode(ifindex)
		if err != nil {
			return nil, err
		}
		mode, reason = m, why
	}
	if mode != ModeGeneric && mode != ModeNative {
		return nil, fmt.Errorf("loader: invalid XDP mode %v", mode)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	l, err := attachXDP(p, ifindex, mode)
	if err != nil && auto && mode == ModeNative && nativeRefused(err) {
		reason = fmt.Sprintf("%s; but the driver refused native mode (%v), so generic", reason, errors.Unwrap(err))
		mode = ModeGeneric
		l, err = attachXDP(p, ifindex, mode)
	}
	if err != nil {
		return nil, attachError(ifindex, mode, err)
	}
	a := &Attachment{prog: p, ifindex: ifindex, mode: mode, reason: reason, link: l}
	p.attached[a] = struct{}{}
	hold(a)
	return a, nil
}

func attachXDP(p *Program, ifindex int, mode Mode) (link.Link, error) {
	flags := link.XDPGenericMode
	if mode == ModeNative {
		flags = link.XDPDriverMode
	}
	return link.AttachXDP(link.XDPOptions{Program: p.objs.Prog, Interface: ifindex, Flags: flags})
}

// nativeRefused reports whether a native attach failed because of the
// driver (no native XDP, or not with this MTU or configuration).
func nativeRefused(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ERANGE)
}

// attachError explains a failed attach.
func attachError(ifindex int, mode Mode, err error) error {
	dev := devName(ifindex)
	switch {
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%w on %s: %s: %w", ErrAttached, dev, conflict(ifindex, dev), err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("loader: attaching XDP: no device with ifindex %d in this network namespace: %w", ifindex, err)
	case mode == ModeNative && errors.Is(err, unix.ERANGE):
		return fmt.Errorf("loader: attaching XDP to %s in native mode: the MTU (on veth: the peer's MTU, at most 3506) is too large for native XDP; use generic mode or a smaller MTU: %w", dev, err)
	case mode == ModeNative && errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("loader: attaching XDP to %s: the driver has no native XDP; use generic mode: %w", dev, err)
	}
	return fmt.Errorf("loader: attaching XDP to %s in %v mode: %w", dev, mode, err)
}

// devName returns "name (ifindex N)", or "ifindex N" if the name is unknown.
func devName(ifindex int) string {
	if l, err := netlink.LinkByIndex(ifindex); err == nil {
		return fmt.Sprintf("%s (ifindex %d)", l.Attrs().Name, ifindex)
	}
	return fmt.Sprintf("ifindex %d", ifindex)
}

// conflict describes the XDP program already on ifindex and how to remove
// it, as far as netlink and the kernel's list of bpf_links tell.
func conflict(ifindex int, dev string) string {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
		return "another program holds the device's XDP hook (see `ip -d link show`)"
	}
	x := l.Attrs().Xdp
	name := l.Attrs().Name
	mode, off := "", "xdp"
	switch x.AttachMode {
	case xdpAttachedDrv:
		mode, off = "native", "xdpdrv"
	case xdpAttachedSKB:
		mode, off = "generic", "xdpgeneric"
	case xdpAttachedHW:
		mode, off = "offloaded", "xdpoffload"
	default:
		mode = "several modes"
	}
	if id, ok := xdpLinkID(ifindex, x.ProgId); ok {
		owner := "the process that owns it"
		if pid, comm, ok := linkOwner(uint32(id)); ok {
			owner = fmt.Sprintf("process %d (%s), which owns it", pid, comm)
		}
		return fmt.Sprintf("program id %d in %s mode, through bpf_link id %d, which lives as long as its owner: "+
			"to attach here, stop %s (detaching the link from outside would cut that process off its device)", x.ProgId, mode, id, owner)
	}
	return fmt.Sprintf("program id %d in %s mode, attached the legacy way (it outlives its owner): "+
		"remove it with `ip link set dev %s %s off`", x.ProgId, mode, name, off)
}

// Values of IFLA_XDP_ATTACHED (enum in linux/if_link.h).
const (
	xdpAttachedDrv = 1
	xdpAttachedSKB = 2
	xdpAttachedHW  = 3
)

// xdpLinkID finds the bpf_link attaching program progID to ifindex.
func xdpLinkID(ifindex int, progID uint32) (link.ID, bool) {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		if x := info.XDP(); x != nil && int(x.Ifindex) == ifindex && uint32(info.Program) == progID {
			return it.ID, true
		}
	}
	return 0, false
}

// RecommendMode returns the XDP mode xam uses on the device ifindex (in the
// calling thread's network namespace) when none is asked for, and why. It
// is xam doctor's recommendation (internal/netdev): generic on veth, where
// it had the lower round-trip time (about 2.7 us against 3.5 us), has no
// peer-MTU limit and veth has no zero-copy anyway; generic on loopback and
// devices without native XDP redirect; native on NICs whose driver reports
// XDP redirect, which runs before the kernel builds an skb and allows
// zero-copy sockets.
func RecommendMode(ifindex int) (Mode, string, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return ModeAuto, "", fmt.Errorf("loader: finding the device of ifindex %d: %w", ifindex, err)
	}
	d, err := netdev.Describe(l.Attrs().Name)
	if err != nil {
		return ModeAuto, "", fmt.Errorf("loader: %w", err)
	}
	why := d.Name + ": " + d.XDPWhy
	if d.XDPMode == "native" {
		return ModeNative, why, nil
	}
	return ModeGeneric, why, nil
}

// linkOwner finds a process that holds bpf_link id open (its fdinfo names
// the link), and its command name.
func linkOwner(id uint32) (pid int, comm string, ok bool) {
	want := fmt.Sprintf("link_id:\t%d\n", id)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, "", false
	}
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fdinfo", n))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", n, fd.Name()))
			if err == nil && strings.Contains(string(info), want) {
				c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n))
				return n, strings.TrimSpace(string(c)), true
			}
		}
	}
	return 0, "", false
}
