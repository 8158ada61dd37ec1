//go:build linux

package loader

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The program on hand-made frames through BPF_PROG_TEST_RUN (Program.Run).
// With no socket registered, bpf_redirect_map returns its fallback action,
// so an accepted xam frame comes back as XDP_PASS and counts as
// RedirectMiss; TestRedirectToSocket shows XDP_REDIRECT with a socket.
//
// BPF_PROG_TEST_RUN puts what does not fit a page (after headroom and
// tailroom) into fragments, which a program without frags support does not
// see: the longest frame it tests whole has 66 cells (3516 bytes). Longer
// frames are tested on a veth with a jumbo MTU (TestJumboFrames), where
// generic XDP linearizes them.
const testRunMaxCells = 66

func TestRunOurFrames(t *testing.T) {
	p := load(t, Config{})
	for _, n := range []int{1, 2, 28, testRunMaxCells} {
		run(t, p, ours(n), ActionPass)
	}
	run(t, p, frame(broadcast, DefaultEtherType, cellSpec{vci: 5}), ActionPass)
	wantCounters(t, p, Counters{Received: 5, RedirectMiss: 5})
}

func TestRunOtherFramesPass(t *testing.T) {
	p := load(t, Config{})
	frames := map[string][]byte{
		"IPv4":                  ipv4Frame(),
		"ARP":                   arpFrame(),
		"IPv6 header only":      ethernet(macB, 0x86dd),
		"802.3 length":          append(ethernet(macB, 100), make([]byte, 46)...),
		"VLAN-tagged xam":       append(ethernet(macB, 0x8100), 0, 1, 0x88, 0xb5, 1, 0, 0, 1),
		"xam EtherType swapped": ethernet(macB, 0xb588),
	}
	for name, f := range frames {
		t.Run(name, func(t *testing.T) { run(t, p, f, ActionPass) })
	}
	wantCounters(t, p, Counters{Passed: uint64(len(frames))})
}

func TestRunShortFrames(t *testing.T) {
	p := load(t, Config{})
	// BPF_PROG_TEST_RUN wants at least an Ethernet header.
	if _, err := p.Run(make([]byte, 13)); err == nil {
		t.Error("Run accepted a 13-byte frame")
	}
	run(t, p, ethernet(macB, 0x0800), ActionPass)
	// Ours but too short for the frame header: malformed.
	for n := 14; n < 18; n++ {
		run(t, p, ours(1)[:n], ActionDrop)
	}
	wantCounters(t, p, Counters{Passed: 1, Received: 4, Malformed: 4})
}

func TestRunMalformed(t *testing.T) {
	mutate := func(f []byte, fn func([]byte) []byte) []byte { return fn(append([]byte(nil), f...)) }
	good := ours(3)
	cases := map[string][]byte{
		"version 0":         mutate(good, func(f []byte) []byte { f[14] = 0; return f }),
		"version 2":         mutate(good, func(f []byte) []byte { f[14] = 2; return f }),
		"zero cells":        mutate(good, func(f []byte) []byte { f[16], f[17] = 0, 0; return f[:18] }),
		"count too high":    mutate(good, func(f []byte) []byte { f[17] = 4; return f }),
		"count too low":     mutate(good, func(f []byte) []byte { f[17] = 2; return f }),
		"count 65535":       mutate(good, func(f []byte) []byte { f[16], f[17] = 0xff, 0xff; return f }),
		"truncated cell":    good[:len(good)-1],
		"trailing byte":     append(append([]byte(nil), good...), 0),
		"header only":       good[:18],
		"headers, no cells": mutate(good, func(f []byte) []byte { return f[:18+5] }),
	}
	t.Run("checked", func(t *testing.T) {
		p := load(t, Config{})
		for name, f := range cases {
			t.Run(name, func(t *testing.T) { run(t, p, f, ActionDrop) })
		}
		wantCounters(t, p, Counters{Received: uint64(len(cases)), Malformed: uint64(len(cases))})
	})
	t.Run("SkipFrameCheck", func(t *testing.T) {
		p := load(t, Config{SkipFrameCheck: true})
		for name, f := range cases {
			t.Run(name, func(t *testing.T) { run(t, p, f, ActionPass) })
		}
		wantCounters(t, p, Counters{Received: uint64(len(cases)), RedirectMiss: uint64(len(cases))})
	})
	t.Run("flags ignored", func(t *testing.T) {
		p := load(t, Config{})
		run(t, p, mutate(good, func(f []byte) []byte { f[15] = 0xff; return f }), ActionPass)
		wantCounters(t, p, Counters{Received: 1, RedirectMiss: 1})
	})
}

func TestRunEtherType(t *testing.T) {
	p := load(t, Config{EtherType: 0x88b6})
	run(t, p, ours(1), ActionPass) // 0x88B5 is now someone else's
	f := ours(1)
	f[13] = 0xb6
	run(t, p, f, ActionPass)
	wantCounters(t, p, Counters{Passed: 1, Received: 1, RedirectMiss: 1})

	f[17] = 2 // malformed: shows that the frame was taken as ours
	run(t, p, f, ActionDrop)
}

func TestRunDstMAC(t *testing.T) {
	p := load(t, Config{DstMAC: macB})
	multicast := net.HardwareAddr{0x01, 0x00, 0x5e, 0, 0, 1}
	run(t, p, frame(macB, DefaultEtherType, cellSpec{}), ActionPass)
	run(t, p, frame(broadcast, DefaultEtherType, cellSpec{}), ActionPass)
	run(t, p, frame(multicast, DefaultEtherType, cellSpec{}), ActionPass)
	run(t, p, frame(macA, DefaultEtherType, cellSpec{}), ActionPass)
	bad := frame(macA, DefaultEtherType, cellSpec{})
	bad[14] = 9 // would be dropped as malformed if it were taken
	run(t, p, bad, ActionPass)
	run(t, p, ipv4Frame(), ActionPass)
	wantCounters(t, p, Counters{Received: 3, RedirectMiss: 3, Passed: 3, OtherDst: 2})
}

func TestRunHEC(t *testing.T) {
	good := cellSpec{vpi: 1, vci: 100}
	bad := cellSpec{vpi: 1, vci: 100, badHEC: true}

	t.Run("first cell only", func(t *testing.T) {
		p := load(t, Config{HECCells: 1})
		run(t, p, frame(macB, DefaultEtherType, good, bad, bad), ActionPass)
		run(t, p, frame(macB, DefaultEtherType, bad, good), ActionPass) // delivered all the same
		wantCounters(t, p, Counters{Received: 2, RedirectMiss: 2, HECErrors: 1})
	})
	t.Run("all cells", func(t *testing.T) {
		p := load(t, Config{HECCells: MaxScanCells})
		run(t, p, frame(macB, DefaultEtherType, good, bad, good, bad), ActionPass)
		cs := make([]cellSpec, testRunMaxCells)
		for i := range cs {
			cs[i] = cellSpec{vpi: uint16(i % 256), vci: uint16(i * 389), badHEC: i%2 == 0}
		}
		run(t, p, frame(macB, DefaultEtherType, cs...), ActionPass)
		wantCounters(t, p, Counters{Received: 2, RedirectMiss: 2, HECErrors: 2 + testRunMaxCells/2})
	})
	t.Run("DropOnHEC", func(t *testing.T) {
		p := load(t, Config{HECCells: 2, DropOnHEC: true})
		run(t, p, frame(macB, DefaultEtherType, good, bad), ActionDrop)
		run(t, p, frame(macB, DefaultEtherType, bad, bad), ActionDrop)
		run(t, p, frame(macB, DefaultEtherType, good, good, bad), ActionPass) // third cell not checked
		wantCounters(t, p, Counters{Received: 3, RedirectMiss: 1, HECErrors: 3, HECDropped: 2})
	})
}

// TestRunHECMatchesReference checks the program's HEC against the bitwise
// reference on random headers, the I.432 vectors, and every single-bit error.
func TestRunHECMatchesReference(t *testing.T) {
	p := load(t, Config{HECCells: 1, DropOnHEC: true})
	if h := refHEC([]byte{0, 0, 0, 0}); h != 0x55 {
		t.Fatalf("reference HEC of the zero header = %#02x, want 0x55", h)
	}
	if h := refHEC([]byte{0, 0, 0, 1}); h != 0x52 {
		t.Fatalf("reference HEC of the idle cell header = %#02x, want 0x52", h)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	f := ours(1)
	hdr := f[18:23]
	for i := range 300 {
		for j := range 4 {
			hdr[j] = byte(rng.Uint32())
		}
		if i == 0 {
			copy(hdr, []byte{0, 0, 0, 1})
		}
		hdr[4] = refHEC(hdr)
		run(t, p, f, ActionPass)
		bit := i % 40
		hdr[bit/8] ^= 0x80 >> (bit % 8)
		run(t, p, f, ActionDrop)
	}
	wantCounters(t, p, Counters{Received: 600, RedirectMiss: 300, HECErrors: 300, HECDropped: 300})
}

func TestRunAdmission(t *testing.T) {
	t.Run("UNI", func(t *testing.T) {
		p := load(t, Config{Admission: true})
		a := cellSpec{vpi: 1, vci: 100}
		b := cellSpec{vpi: 1, vci: 101}
		c := cellSpec{vpi: 255, vci: 65535}
		run(t, p, frame(macB, DefaultEtherType, a), ActionDrop) // nothing admitted yet
		for _, vc := range [][2]uint16{{1, 100}, {255, 65535}} {
			if err := p.Admit(vc[0], vc[1]); err != nil {
				t.Fatal(err)
			}
		}
		run(t, p, frame(macB, DefaultEtherType, a), ActionPass)
		run(t, p, frame(macB, DefaultEtherType, a, c, a), ActionPass)
		run(t, p, frame(macB, DefaultEtherType, a, a, b), ActionDrop) // one cell is enough
		run(t, p, frame(macB, DefaultEtherType, cellSpec{vpi: 2, vci: 100}), ActionDrop)
		if err := p.Revoke(1, 100); err != nil {
			t.Fatal(err)
		}
		if err := p.Revoke(1, 100); err != nil {
			t.Errorf("second Revoke: %v", err)
		}
		run(t, p, frame(macB, DefaultEtherType, a), ActionDrop)
		run(t, p, frame(macB, DefaultEtherType, c), ActionPass)
		wantCounters(t, p, Counters{Received: 7, RedirectMiss: 3, NotAdmitted: 4})

		if err := p.Admit(256, 1); err == nil {
			t.Error("Admit accepted VPI 256 on UNI cells")
		}
	})
	t.Run("NNI", func(t *testing.T) {
		p := load(t, Config{Admission: true, NNI: true})
		if err := p.Admit(0xabc, 7); err != nil {
			t.Fatal(err)
		}
		run(t, p, frame(macB, DefaultEtherType, cellSpec{vpi: 0xabc, vci: 7, nni: true}), ActionPass)
		run(t, p, frame(macB, DefaultEtherType, cellSpec{vpi: 0xbc, vci: 7}), ActionDrop)
		if err := p.Admit(0x1000, 7); err == nil {
			t.Error("Admit accepted VPI 4096 on NNI cells")
		}
	})
	t.Run("with HEC", func(t *testing.T) {
		p := load(t, Config{Admission: true, HECCells: 3})
		if err := p.Admit(1, 100); err != nil {
			t.Fatal(err)
		}
		// A bad HEC on an admitted circuit is delivered and counted; an
		// unadmitted cell after it drops the frame, and the bad HEC seen
		// before it stays counted.
		run(t, p, frame(macB, DefaultEtherType, cellSpec{vpi: 1, vci: 100, badHEC: true}), ActionPass)
		run(t, p, frame(macB, DefaultEtherType, cellSpec{vpi: 1, vci: 100, badHEC: true}, cellSpec{vpi: 9, vci: 9}), ActionDrop)
		wantCounters(t, p, Counters{Received: 2, RedirectMiss: 1, NotAdmitted: 1, HECErrors: 2})
	})
	t.Run("off", func(t *testing.T) {
		p := load(t, Config{})
		if err := p.Admit(1, 1); !errors.Is(err, ErrAdmissionOff) {
			t.Errorf("Admit with admission off: %v, want ErrAdmissionOff", err)
		}
		if err := p.Revoke(1, 1); !errors.Is(err, ErrAdmissionOff) {
			t.Errorf("Revoke with admission off: %v, want ErrAdmissionOff", err)
		}
	})
}

// runMany runs p's program n times on f in one BPF_PROG_TEST_RUN call.
func runMany(t *testing.T, p *Program, f []byte, n uint32) {
	t.Helper()
	if _, err := p.XDP().Run(&ebpf.RunOptions{Data: f, Repeat: n}); err != nil {
		t.Fatalf("Run with Repeat %d: %v", n, err)
	}
}

// tolerance is five standard deviations of the fraction of n events of
// probability p (10% of 20000: ± 1.06 points); a correct program fails a
// check about once in 1.7 million.
func tolerance(p float64, n uint64) float64 {
	return 5 * math.Sqrt(p*(1-p)/float64(n))
}

// within reports whether got/total lies within tol of want.
func within(got, total uint64, want, tol float64) bool {
	return math.Abs(float64(got)/float64(total)-want) <= tol
}

func TestRunFaultRates(t *testing.T) {
	const n = 20000
	cases := []struct {
		name string
		f    Faults
	}{
		{"drop 10%", Faults{DropRate: 0.1}},
		{"corrupt 5%", Faults{CorruptRate: 0.05}},
		{"both", Faults{DropRate: 0.3, CorruptRate: 0.2}},
		{"seeded", Faults{DropRate: 0.1, CorruptRate: 0.05, Seed: 42}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := load(t, Config{})
			if err := p.SetFaults(c.f); err != nil {
				t.Fatal(err)
			}
			runMany(t, p, ours(4), n)
			got := counters(t, p)
			t.Logf("%+v", got)
			// The kernel may run the program more often than asked
			// (interrupted runs restart), so rates are taken from the
			// counters, not from n.
			if got.Received < n {
				t.Fatalf("Received %d, want at least %d", got.Received, n)
			}
			if tol := tolerance(c.f.DropRate, got.Received); !within(got.FaultDropped, got.Received, c.f.DropRate, tol) {
				t.Errorf("dropped %d of %d, want %.1f%% ± %.2f", got.FaultDropped, got.Received, 100*c.f.DropRate, 100*tol)
			}
			kept := got.Received - got.FaultDropped
			if tol := tolerance(c.f.CorruptRate, kept); !within(got.FaultCorrupted, kept, c.f.CorruptRate, tol) {
				t.Errorf("corrupted %d of %d, want %.1f%% ± %.2f", got.FaultCorrupted, kept, 100*c.f.CorruptRate, 100*tol)
			}
		})
	}
}

func TestRunFaultsAlwaysAndOff(t *testing.T) {
	p := load(t, Config{})
	if err := p.SetFaults(Faults{DropRate: 1}); err != nil {
		t.Fatal(err)
	}
	runMany(t, p, ours(1), 5000)
	c := counters(t, p)
	if c.FaultDropped != c.Received {
		t.Errorf("rate 1 dropped %d of %d", c.FaultDropped, c.Received)
	}
	if err := p.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	runMany(t, p, ours(1), 5000)
	c2 := counters(t, p)
	if c2.FaultDropped != c.FaultDropped || c2.FaultCorrupted != 0 {
		t.Errorf("faults off still injected: %+v then %+v", c, c2)
	}
}

func TestRunSeededFaultsRepeat(t *testing.T) {
	// Every CPU starts at the seed, so one test run on one CPU makes the
	// same decisions each time. The kernel may move a test run to
	// another CPU between its repeats (it reschedules when another task
	// is due, as on a loaded machine), whose state starts at the seed
	// again: the runs are pinned to one CPU.
	pinOneCPU(t)
	f := Faults{DropRate: 0.25, CorruptRate: 0.25, Seed: 7}
	var first Counters
	for i := range 3 {
		p := load(t, Config{})
		if err := p.SetFaults(f); err != nil {
			t.Fatal(err)
		}
		runMany(t, p, ours(2), 1000)
		c := counters(t, p)
		if i == 0 {
			first = c
			continue
		}
		if c.Received == first.Received && c != first {
			t.Errorf("seeded run %d: %+v, first run %+v", i, c, first)
		}
	}
	// A new seed starts another stream.
	p := load(t, Config{})
	if err := p.SetFaults(Faults{DropRate: 0.25, CorruptRate: 0.25, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	runMany(t, p, ours(2), 1000)
	if c := counters(t, p); c.Received == first.Received && c == first {
		t.Errorf("seeds 7 and 8 gave the same decisions: %+v", c)
	}
}

// pinOneCPU keeps the test's goroutine on its thread and the thread on
// the first CPU it may run on, until the test ends.
func pinOneCPU(t *testing.T) {
	runtime.LockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	for c := range 1024 {
		if was.IsSet(c) {
			one.Set(c)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.SchedSetaffinity(0, &was); err != nil {
			t.Error(err)
		}
		runtime.UnlockOSThread()
	})
}

// changed returns the offsets at which out differs from in.
func changed(in, out []byte) []int {
	var diffs []int
	for i := range in {
		if in[i] != out[i] {
			diffs = append(diffs, i)
		}
	}
	return diffs
}

func TestRunCorruptFlipsOnePayloadByte(t *testing.T) {
	p := load(t, Config{HECCells: MaxScanCells})
	if err := p.SetFaults(Faults{CorruptRate: 1}); err != nil {
		t.Fatal(err)
	}
	in := ours(5)
	for range 200 {
		out := make([]byte, len(in))
		ret, err := p.XDP().Run(&ebpf.RunOptions{Data: in, DataOut: out})
		if err != nil {
			t.Fatal(err)
		}
		if Action(ret) != ActionPass {
			t.Fatalf("verdict %v", Action(ret))
		}
		diffs := changed(in, out)
		if len(diffs) != 1 {
			t.Fatalf("%d bytes changed, want 1", len(diffs))
		}
		at := diffs[0]
		if at < 18 || (at-18)%53 < 5 {
			t.Fatalf("byte %d changed: not in a cell payload", at)
		}
		if in[at]^out[at] != 0xff {
			t.Fatalf("byte %d: %#02x became %#02x, want inverted", at, in[at], out[at])
		}
	}
	c := counters(t, p)
	if c.FaultCorrupted != c.Received || c.HECErrors != 0 {
		t.Errorf("counters %+v: want every frame corrupted, headers intact", c)
	}
	if !bytes.Equal(in, ours(5)) {
		t.Error("Run changed its input")
	}
}

func TestSetFaultsValidates(t *testing.T) {
	p := load(t, Config{})
	for _, f := range []Faults{{DropRate: -0.1}, {DropRate: 1.01}, {CorruptRate: math.NaN()}, {CorruptRate: math.Inf(1)}} {
		if err := p.SetFaults(f); err == nil {
			t.Errorf("SetFaults(%+v) accepted", f)
		}
	}
}

func TestRegisterValidates(t *testing.T) {
	p := load(t, Config{MaxQueues: 4})
	if err := p.Register(4, 3); err == nil {
		t.Error("Register accepted queue 4 of 4")
	}
	if err := p.Register(-1, 3); err == nil {
		t.Error("Register accepted queue -1")
	}
	if err := p.Register(0, -1); err == nil {
		t.Error("Register accepted fd -1")
	}
	if err := p.Register(0, 0); err == nil { // stdin is no AF_XDP socket
		t.Error("Register accepted a non-XSK fd")
	}
	if err := p.Unregister(1); err != nil {
		t.Errorf("Unregister of an empty queue: %v", err)
	}
}

func TestClosedProgram(t *testing.T) {
	p := load(t, Config{Admission: true})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := p.Counters(); !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Counters after Close: %v", err)
	}
	if _, err := p.Run(ours(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := p.Admit(1, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Admit after Close: %v", err)
	}
	if _, err := p.Attach(1, ModeGeneric); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v", err)
	}
}

func TestProgramsAreIndependent(t *testing.T) {
	p1 := load(t, Config{})
	p2 := load(t, Config{})
	if err := p1.SetFaults(Faults{DropRate: 1}); err != nil {
		t.Fatal(err)
	}
	run(t, p1, ours(1), ActionDrop)
	run(t, p2, ours(1), ActionPass)
	wantCounters(t, p1, Counters{Received: 1, FaultDropped: 1})
	wantCounters(t, p2, Counters{Received: 1, RedirectMiss: 1})
}
