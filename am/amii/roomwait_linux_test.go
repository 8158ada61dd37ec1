//go:build linux

package amii

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp/memlink"
)

// A firmware-mode send that waits for room (here a medium slot: the
// server never polls, so its queues fill, the daemon's window fills, and
// the client's medium requests stay in its send queue holding their
// slots) sleeps once its first Config.Spin has passed: the one-second
// wait that gives up costs its thread a small part of a second of CPU,
// where the loop of yields it replaces ran for all of it (on a loaded
// machine, taking a core from the daemon that would make the room).
func TestAMIIFirmwareRoomWaitSleeps(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	pa, pb := startDaemons(t, la, lb)
	server, err := Dial(pb, VNet{ID: 20, Tag: amiiRed, Table: []Name{{Host: amiiHostA, Endpoint: 21}}}, Config{QueueEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	server.RegisterMedium(func(*Token, []uint64, []byte) {})
	client, err := Dial(pa, VNet{ID: 21, Tag: amiiRed, Table: []Name{{Host: amiiHostB, Endpoint: 20}}},
		Config{Credits: 64, GiveUp: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	data := make([]byte, 256)
	var used, took time.Duration
	sent := 0
	for ; sent < 1000; sent++ {
		before, start := cpu(), time.Now()
		if err = client.RequestMedium(0, 0, data, uint64(sent)); err != nil {
			used, took = cpu()-before, time.Since(start)
			break
		}
	}
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("after %d requests: %v, want ErrTimeout (the server never polls)", sent, err)
	}
	if used > took/10 {
		t.Errorf("a %v wait for room used %v of CPU: it spins", took.Round(time.Millisecond), used)
	}
	t.Logf("after %d requests: %v; the %v wait used %v of CPU", sent, err, took.Round(time.Millisecond), used)
}
