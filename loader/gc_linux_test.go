//go:build linux

package loader

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
)

// collectGarbage runs the garbage collector several times and gives the
// cleanups and finalizers it queues (cilium/ebpf closes the descriptor of
// an object it finds unreachable) time to run.
func collectGarbage() {
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

// attachForgotten loads a Program for h, attaches it to h's veth end,
// registers socket xsk for queue 0, and keeps no reference to either: it
// returns weak pointers only, as a program that drops what Load and Attach
// gave it holds nothing at all.
//
//go:noinline
func attachForgotten(t *testing.T, h *netnstest.Host, xsk int) (weak.Pointer[Program], weak.Pointer[Attachment]) {
	t.Helper()
	p, err := Load(Config{DstMAC: h.MAC})
	if err != nil {
		t.Fatalf("Load: %+v", err)
	}
	var a *Attachment
	if err := h.Do(func() (err error) { a, err = p.Attach(h.Index, ModeGeneric); return err }); err != nil {
		p.Close()
		t.Fatalf("attaching to %s: %v", h, err)
	}
	if err := p.Register(0, xsk); err != nil {
		p.Close()
		t.Fatal(err)
	}
	return weak.Make(p), weak.Make(a)
}

// dupForgotten attaches a duplicator that duplicates every xam frame on
// lab's port towards A and keeps no reference to it.
//
//go:noinline
func dupForgotten(t *testing.T, lab *bridgeLab) weak.Pointer[Duplicator] {
	t.Helper()
	var d *Duplicator
	if err := lab.S.Do(func() (err error) { d, err = AttachDuplicator(lab.FromA, Duplicate{Rate: 1}); return err }); err != nil {
		t.Fatalf("%+v", err)
	}
	return weak.Make(d)
}

// TestAttachedWithoutReferences: a program attached by Attach stays
// attached, and frames keep reaching the socket registered with it, when
// its owner keeps no reference to the Program or the Attachment and the
// garbage collector has run, cleanups and finalizers included; the package
// promises attachment until Close or the end of the process. Close, on the
// Attachment the package still holds, detaches it as ever. Before, the
// collector finalized the bpf_link and the program was gone from the
// device: the smallest AM-II program, which keeps neither, stopped
// receiving after its first collection.
func TestAttachedWithoutReferences(t *testing.T) {
	testenv.RequirePrivileged(t)
	pair := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	var x *testXSK
	if err := pair.B.Do(func() (err error) { x, err = newTestXSK(pair.B.Index, 0); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	wp, wa := attachForgotten(t, pair.B, x.FD())
	t.Cleanup(func() {
		if p := wp.Value(); p != nil {
			p.Close()
		}
	})

	collectGarbage()
	if wp.Value() == nil || wa.Value() == nil {
		t.Errorf("the garbage collector took an attached Program (%v) or its Attachment (%v)", wp.Value() == nil, wa.Value() == nil)
	}
	if st := xdpState(t, pair.B); !st.Attached {
		t.Fatalf("after garbage collection, netlink says %+v: the program is detached", st)
	}
	send := sender(t, pair.A)
	const n = 10
	for i := range n {
		f := withMAC(ours(1+i), pair.B.MAC)
		send(f)
	}
	if got := receiveN(x, n); len(got) != n {
		t.Fatalf("after garbage collection the socket received %d of %d frames", len(got), n)
	}

	a := wa.Value()
	if a == nil {
		t.Fatal("the Attachment is gone")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if st := xdpState(t, pair.B); st.Attached {
		t.Errorf("after Close, netlink says %+v", st)
	}
}

// TestDuplicatorWithoutReferences: the same for a Duplicator: it keeps
// duplicating when nothing refers to it and the garbage collector has run,
// until Close.
func TestDuplicatorWithoutReferences(t *testing.T) {
	lab := newBridgeLab(t)
	p := load(t, Config{DstMAC: lab.B.MAC})
	attach(t, p, lab.B, ModeGeneric)
	wd := dupForgotten(t, lab)
	t.Cleanup(func() {
		if d := wd.Value(); d != nil {
			d.Close()
		}
	})

	collectGarbage()
	if wd.Value() == nil {
		t.Error("the garbage collector took an attached Duplicator")
	}
	send := sender(t, lab.A)
	const n = 10
	for range n {
		send(withMAC(ours(1), lab.B.MAC))
	}
	if c := waitCounters(t, p, func(c Counters) bool { return c.Received >= 2*n }); c.Received != 2*n {
		t.Errorf("after garbage collection B received %d frames for %d sent, want each twice", c.Received, n)
	}
}
