package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

var (
	pairs     atomic.Uint64 // pairs created by this process
	token     = newToken()  // distinguishes this process from an earlier one with its pid
	sweepOnce sync.Once
)

// upTimeout bounds the wait for both veth ends to report carrier.
const upTimeout = 5 * time.Second

func newToken() string {
	var b [2]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b[:])
}

// NewVethPair returns two new network namespaces joined by a veth pair, set
// up as the package documentation describes, and removes them in tb's cleanup.
// It calls testenv.RequirePrivileged first, and fails the test if the set-up
// fails.
func NewVethPair(tb testing.TB, opts ...Option) *Pair {
	tb.Helper()
	testenv.RequirePrivileged(tb)
	sweepOnce.Do(func() {
		if err := Sweep(); err != nil {
			tb.Logf("netnstest: removing leftovers of earlier runs: %v", err)
		}
	})
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		tb.Fatalf("netnstest: %v", err)
	}
	p := newPair(os.Getpid(), token, pairs.Add(1), cfg)
	tb.Cleanup(func() {
		if err := p.close(); err != nil {
			tb.Errorf("netnstest: removing %s and %s: %v", p.A.NS, p.B.NS, err)
		}
	})
	if err := p.setup(cfg); err != nil {
		tb.Fatalf("netnstest: %v", err)
	}
	return p
}

func (p *Pair) hosts() []*Host { return []*Host{p.A, p.B} }

// setup builds the pair step by step; close undoes whatever part is done.
func (p *Pair) setup(cfg config) error {
	for _, h := range p.hosts() {
		if err := h.create(); err != nil {
			return err
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = p.A.Link
	attrs.MTU = cfg.mtu
	attrs.NumTxQueues, attrs.NumRxQueues = cfg.queues, cfg.queues
	veth := netlink.NewVeth(attrs)
	veth.PeerName = p.B.Link
	veth.PeerNamespace = netlink.NsFd(p.B.Handle)
	// Created in A (through A's netlink socket) with the peer in B: no end
	// ever appears in the caller's namespace.
	if err := p.A.Netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s to %s with peer %s in %s: %w", p.A.Link, p.A.NS, p.B.Link, p.B.NS, err)
	}
	for _, h := range p.hosts() {
		if err := h.configure(cfg); err != nil {
			return err
		}
	}
	for _, h := range p.hosts() {
		if err := lab.WaitUp(h.Netlink, h.Index, upTimeout); err != nil {
			return fmt.Errorf("%s: %w", h, err)
		}
	}
	return nil
}

// create makes h's namespace and a netlink socket in it.
func (h *Host) create() error {
	ns, err := lab.NewNamespace(h.NS)
	if err != nil {
		return err
	}
	h.Handle, h.Netlink = ns.Handle, ns.Netlink
	return nil
}

// configure brings lo and the veth end up, records the end's attributes,
// and sets the addresses.
func (h *Host) configure(cfg config) error {
	ns := &lab.Namespace{Name: h.NS, Handle: h.Handle, Netlink: h.Netlink}
	info, err := ns.ConfigureLink(h.Link, h.Addr, cfg.ipv6)
	h.Index, h.MTU, h.Queues, h.MAC = info.Index, info.MTU, info.Queues, info.MAC
	return err
}

// close removes whatever part of the pair exists. It deletes the veth first,
// which removes both ends synchronously (the kernel tears a namespace down
// asynchronously), then closes the sockets and handles, then removes the names.
func (p *Pair) close() error {
	var errs []error
	if nl := p.A.Netlink; nl != nil {
		link, err := nl.LinkByName(p.A.Link)
		var notFound netlink.LinkNotFoundError
		switch {
		case err == nil:
			if err := nl.LinkDel(link); err != nil {
				errs = append(errs, fmt.Errorf("deleting %s: %w", p.A, err))
			}
		case !errors.As(err, &notFound):
			errs = append(errs, fmt.Errorf("finding %s: %w", p.A, err))
		}
	}
	for _, h := range p.hosts() {
		if h.Netlink != nil {
			h.Netlink.Close()
			h.Netlink = nil
		}
		if h.Handle.IsOpen() {
			if err := h.Handle.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing handle of %s: %w", h.NS, err))
			}
		}
		if err := lab.DeleteNamespace(h.NS); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
