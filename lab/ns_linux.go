package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NamespaceDir is where named network namespaces are mounted.
const NamespaceDir = "/run/netns"

// Namespace is a named network namespace and a netlink socket inside it.
type Namespace struct {
	Name    string
	Handle  netns.NsHandle
	Netlink *netlink.Handle // route netlink inside the namespace; safe for concurrent use
}

// NewNamespace creates the named namespace (like `ip netns add`) and opens a
// netlink socket in it. On error, nothing is left behind.
func NewNamespace(name string) (*Namespace, error) {
	n := &Namespace{Name: name, Handle: netns.None()}
	err := onLockedThread(func() error {
		// NewNamed moves the thread into the new namespace; onLockedThread
		// moves it back.
		h, err := netns.NewNamed(name)
		n.Handle = h
		return err
	})
	if err != nil {
		DeleteNamespace(name)
		return nil, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	if n.Netlink, err = netlink.NewHandleAt(n.Handle); err != nil {
		n.Close()
		DeleteNamespace(name)
		return nil, fmt.Errorf("opening netlink in %s: %w", name, err)
	}
	return n, nil
}

// OpenNamespace opens an existing named namespace.
func OpenNamespace(name string) (*Namespace, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("opening namespace %s: %w", name, err)
	}
	n := &Namespace{Name: name, Handle: h}
	if n.Netlink, err = netlink.NewHandleAt(h); err != nil {
		n.Close()
		return nil, fmt.Errorf("opening netlink in %s: %w", name, err)
	}
	return n, nil
}

// Do runs fn on a thread switched into the namespace; see the package
// documentation.
func (n *Namespace) Do(fn func() error) error {
	return onLockedThread(func() error {
		if err := netns.Set(n.Handle); err != nil {
			return fmt.Errorf("entering namespace %s: %w", n.Name, err)
		}
		return fn()
	})
}

// Close closes the netlink socket and the namespace handle. The namespace
// itself stays while its name is mounted.
func (n *Namespace) Close() error {
	if n.Netlink != nil {
		n.Netlink.Close()
		n.Netlink = nil
	}
	if n.Handle.IsOpen() {
		err := n.Handle.Close()
		n.Handle = netns.None()
		if err != nil {
			return fmt.Errorf("closing handle of %s: %w", n.Name, err)
		}
	}
	return nil
}

// DeleteNamespace removes a named namespace: it deletes the namespace's
// links (so that veth peers elsewhere go at once rather than when the
// kernel gets to tearing the namespace down), then unmounts and removes the
// name. A name that does not exist is not an error.
func DeleteNamespace(name string) error {
	var errs []error
	if h, err := netns.GetFromName(name); err == nil {
		if nl, err := netlink.NewHandleAt(h); err == nil {
			links, _ := nl.LinkList()
			for _, l := range links {
				if l.Attrs().Name == "lo" {
					continue
				}
				var notFound netlink.LinkNotFoundError
				if err := nl.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) && !errors.As(err, &notFound) {
					errs = append(errs, fmt.Errorf("deleting %s in %s: %w", l.Attrs().Name, name, err))
				}
			}
			nl.Close()
		}
		h.Close()
	}
	path := filepath.Join(NamespaceDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmounting %s: %w", path, err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing %s: %w", path, err))
	}
	return errors.Join(errs...)
}

// Namespaces lists the named namespaces whose names start with prefix, sorted.
func Namespaces(prefix string) ([]string, error) {
	entries, err := os.ReadDir(NamespaceDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// LinkInfo is what ConfigureLink reads of an interface.
type LinkInfo struct {
	Index, MTU, Queues int
	MAC                net.HardwareAddr
}

// ConfigureLink brings lo and the interface name of the namespace up,
// disables IPv6 on the interface unless ipv6 is set, assigns addr when it
// is valid, and returns the interface's attributes.
func (n *Namespace) ConfigureLink(name string, addr netip.Prefix, ipv6 bool) (LinkInfo, error) {
	lo, err := n.Netlink.LinkByName("lo")
	if err == nil {
		err = n.Netlink.LinkSetUp(lo)
	}
	if err != nil {
		return LinkInfo{}, fmt.Errorf("bringing lo up in %s: %w", n.Name, err)
	}
	link, err := n.Netlink.LinkByName(name)
	if err != nil {
		return LinkInfo{}, fmt.Errorf("finding %s in %s: %w", name, n.Name, err)
	}
	a := link.Attrs()
	info := LinkInfo{Index: a.Index, MTU: a.MTU, Queues: a.NumTxQueues, MAC: append(net.HardwareAddr(nil), a.HardwareAddr...)}
	if !ipv6 {
		if err := n.Do(func() error { return DisableIPv6(name) }); err != nil {
			return info, fmt.Errorf("disabling IPv6 on %s/%s: %w", n.Name, name, err)
		}
	}
	if addr.IsValid() {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}}
		if err := n.Netlink.AddrAdd(link, a); err != nil {
			return info, fmt.Errorf("adding %v to %s/%s: %w", addr, n.Name, name, err)
		}
	}
	if err := n.Netlink.LinkSetUp(link); err != nil {
		return info, fmt.Errorf("bringing %s/%s up: %w", n.Name, name, err)
	}
	return info, nil
}

// DisableIPv6 sets disable_ipv6 on link in the calling thread's namespace
// (the sysctls under /proc/sys/net are those of the opening thread's
// namespace), so the link stays silent: no router solicitations, no MLD.
// A kernel without IPv6 has nothing to disable.
func DisableIPv6(link string) error {
	path := filepath.Join("/proc/sys/net/ipv6/conf", link, "disable_ipv6")
	err := os.WriteFile(path, []byte("1\n"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// WaitUp waits until the link reports operstate up: until then the kernel
// has not attached its queueing discipline and drops what is sent.
func WaitUp(nl *netlink.Handle, index int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		link, err := nl.LinkByIndex(index)
		if err != nil {
			return fmt.Errorf("reading the state of link %d: %w", index, err)
		}
		state := link.Attrs().OperState
		if state == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still %v after %v", link.Attrs().Name, state, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errGoexit = errors.New("lab: function called runtime.Goexit (t.FailNow or t.SkipNow outside the test goroutine?)")

// onLockedThread runs fn on a new goroutine locked to its thread and
// restores the thread's namespace afterwards; a panic in fn is re-raised in
// the caller.
func onLockedThread(fn func() error) error {
	type result struct {
		err      error // fn's
		restore  error // returning the thread
		returned bool  // fn returned (did not panic or Goexit)
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread() // not switched yet
			done <- result{err: fmt.Errorf("getting the thread's namespace: %w", err), returned: true}
			return
		}
		var r result
		defer func() {
			if !r.returned {
				if p := recover(); p != nil {
					r.panicked = fmt.Sprintf("%v\n\ngoroutine of lab.Namespace.Do:\n%s", p, debug.Stack())
				}
			}
			r.restore = restore(orig)
			if r.restore == nil {
				runtime.UnlockOSThread()
			} // else: exit locked, and the thread goes with the goroutine
			orig.Close()
			done <- r
		}()
		r.err = fn()
		r.returned = true
	}()
	r := <-done
	if r.panicked != nil {
		panic(r.panicked)
	}
	if !r.returned {
		return errors.Join(errGoexit, r.restore)
	}
	return errors.Join(r.err, r.restore)
}

// restore returns the calling thread to orig and checks that it got there.
func restore(orig netns.NsHandle) error {
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("lab: returning thread to its namespace: %w", err)
	}
	cur, err := netns.Get()
	if err != nil {
		return fmt.Errorf("lab: checking the thread's namespace: %w", err)
	}
	defer cur.Close()
	if !cur.Equal(orig) {
		return fmt.Errorf("lab: thread in namespace %v after returning to %v", cur, orig)
	}
	return nil
}
