package endpoint

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/internal/testenv"
)

// A page of doorbells hands out its bits once each, and again once freed;
// an application's mapping rings them and the engine's Take sees each rung
// bit once, and nothing when none rang; bits outside the endpoint bits are
// ignored; neither mapping leaks.
func TestBells(t *testing.T) {
	testenv.NoMemfdLeaks(t, bellsName)
	b, err := NewBells()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seen := map[int]bool{}
	for range BellsMax {
		bit, ok := b.Alloc()
		if !ok || seen[bit] || bit < 64 || bit >= 64+BellsMax {
			t.Fatalf("Alloc gave %d (%v) after %d", bit, ok, len(seen))
		}
		seen[bit] = true
	}
	if _, ok := b.Alloc(); ok {
		t.Fatal("Alloc past BellsMax")
	}
	b.Free(100)
	if bit, ok := b.Alloc(); !ok || bit != 100 {
		t.Fatalf("after Free(100): Alloc gave %d (%v)", bit, ok)
	}
	app, err := MapBells(b.FD())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	take := func() []int {
		var got []int
		b.Take(func(bit int) { got = append(got, bit) })
		return got
	}
	if got := take(); got != nil {
		t.Fatalf("nothing rang, Take gave %v", got)
	}
	for _, bit := range []int{64, 65, 127, 128, 4095, 0, 63, 4096, -1} {
		app.Ring(bit)
	}
	app.Ring(65) // twice: once
	if got, want := take(), []int{64, 65, 127, 128, 4095}; !slices.Equal(got, want) {
		t.Fatalf("Take gave %v, want %v", got, want)
	}
	if got := take(); got != nil {
		t.Fatalf("a second Take gave %v", got)
	}
	// A freed bit is cleared: a ring before the Free is not reported.
	app.Ring(300)
	b.Free(300)
	if got := take(); got != nil {
		t.Fatalf("after Free: %v", got)
	}
}

// MapBells takes only a sealed memfd of BellsSize bytes.
func TestMapBellsRefuses(t *testing.T) {
	m, err := NewMemory(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := MapBells(m.FD()); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("an endpoint's memory as doorbells: %v", err)
	}
	fd, err := unix.MemfdCreate("not-sealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, BellsSize); err != nil {
		t.Fatal(err)
	}
	if _, err := MapBells(fd); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("an unsealed memfd: %v", err)
	}
	// A view given such a page refuses it and keeps working.
	v, err := Map(m.FD())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.MapBells(fd); err == nil || m.RingsBells() {
		t.Errorf("View.MapBells of an unsealed memfd: %v, engine told it rings: %v", err, m.RingsBells())
	}
}

// A view that mapped its page rings its bit there (and its header's
// doorbell) when the engine marked the endpoint, and not otherwise; the
// engine's memory reports that it rings.
func TestViewRingsBells(t *testing.T) {
	m, v, b, bit := belledEndpoint(t)
	if m.RingsBells() {
		t.Fatal("rings before mapping")
	}
	if err := v.MapBells(b.FD()); err != nil {
		t.Fatal(err)
	}
	if !m.RingsBells() {
		t.Fatal("the engine is not told the view rings its page")
	}
	rung := func() []int {
		var got []int
		b.Take(func(bit int) { got = append(got, bit) })
		return got
	}
	d := Descriptor{Class: ClassShort, NArgs: 1}
	if err := v.Send(RequestSend, &d); err != nil {
		t.Fatal(err)
	}
	if got := rung(); got != nil || m.Doorbell() {
		t.Fatalf("unmarked: rang %v", got)
	}
	m.SetEvicted(true)
	if err := v.Send(RequestSend, &d); err != nil {
		t.Fatal(err)
	}
	if got := rung(); !slices.Equal(got, []int{bit}) || !m.Doorbell() {
		t.Fatalf("marked: rang %v, want [%d] and the header's doorbell", got, bit)
	}
}

// Put sets the endpoint's arrival bit in its page, after the descriptor
// is in the queue; the application clears it, and two mappings of one page
// are the same page, another page's are not.
func TestBellsArrivals(t *testing.T) {
	m, v, b, bit := belledEndpoint(t)
	if err := v.MapBells(b.FD()); err != nil {
		t.Fatal(err)
	}
	page, vbit := v.Bells()
	if vbit != bit || !page.SamePage(b) {
		t.Fatalf("the view's page and bit: %d, same page %v", vbit, page.SamePage(b))
	}
	other, err := NewBells()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if page.SamePage(other) {
		t.Fatal("two pages taken for one")
	}
	mask := uint64(1) << (bit % 64)
	if page.Arrivals(bit)&mask != 0 {
		t.Fatal("an arrival before any Put")
	}
	d := Descriptor{Class: ClassShort, NArgs: 1}
	if err := m.Put(RequestReceive, &d); err != nil {
		t.Fatal(err)
	}
	if page.Arrivals(bit)&mask == 0 || v.Ready() == 0 {
		t.Fatal("no arrival bit after Put")
	}
	page.ClearArrival(bit)
	if page.Arrivals(bit)&mask != 0 {
		t.Fatal("the arrival bit stays after ClearArrival")
	}
	m.SetBell(nil, 0)
	if err := m.Put(RequestReceive, &d); err != nil {
		t.Fatal(err)
	}
	if page.Arrivals(bit) != 0 {
		t.Fatal("an arrival bit set for an endpoint without a page")
	}
}

// belledEndpoint is an endpoint, its view, and a page of doorbells in which
// the engine gave it a bit (the view has not mapped the page).
func belledEndpoint(t *testing.T) (*Memory, *View, *Bells, int) {
	t.Helper()
	m, v := newTestEndpoint(t, Config{})
	b, err := NewBells()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	bit, _ := b.Alloc()
	m.SetBell(b, bit)
	return m, v, b, bit
}
