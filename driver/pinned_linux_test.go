//go:build linux

package driver_test

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/internal/testenv"
)

// TestPinned checks that Open locks every area in memory, that PinnedBytes
// reports it, and that Close unlocks it.
func TestPinned(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	a, _ := configs()
	a.NoLock = false
	before := testenv.LockedKB()
	d, err := driver.Open(la, withPeers(a, lb.HardwareAddr()))
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EAGAIN) {
		testenv.SkipOrFail(t, "cannot lock memory: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	page := os.Getpagesize()
	per := cells.CellsPerFrame(la.MTU())
	frames := (driver.DefaultSendSlots + per - 1) / per
	least := d.NumConns()*(driver.DefaultSendSlots*cells.PayloadSize+driver.DefaultRecvSlots*cells.CellSize) +
		frames*cells.FrameLen(per)
	most := least + (2*d.NumConns()+frames)*64 + page
	pinned := d.PinnedBytes()
	if pinned%page != 0 || pinned < least || pinned > most {
		t.Errorf("PinnedBytes %d, want a multiple of %d in [%d, %d]", pinned, page, least, most)
	}
	if got := testenv.LockedKB() - before; got != pinned/1024 {
		t.Errorf("VmLck grew by %d kB, PinnedBytes says %d kB", got, pinned/1024)
	}
	t.Logf("%d connections, default slots: %d bytes pinned (%d per connection)", d.NumConns(), pinned, pinned/d.NumConns())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := testenv.LockedKB(); got != before || d.PinnedBytes() != 0 {
		t.Errorf("after Close: VmLck %d kB (%d before), PinnedBytes %d", got, before, d.PinnedBytes())
	}
	b, _ := configs()
	nd, err := driver.Open(lb, withPeers(b, la.HardwareAddr())) // NoLock
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if nd.PinnedBytes() != 0 {
		t.Errorf("PinnedBytes %d with NoLock", nd.PinnedBytes())
	}
}
