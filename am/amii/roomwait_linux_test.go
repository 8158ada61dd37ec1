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

// TestAMIIFirmwareWaitRunsReplyTimer: in firmware mode, a client that
// blocks in Wait for the reply to a request its server took and never
// answers wakes when the reply timeout passes (Wait ends ready), and the
// next Poll hands the request to the error handler. Before, the block
// lasted Wait's whole timeout, and a loop of such Waits never ran the
// timer, which Poll runs every few dozen calls.
func TestAMIIFirmwareWaitRunsReplyTimer(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	pa, pb := startDaemons(t, la, lb)
	server, err := Dial(pb, VNet{ID: 20, Tag: amiiRed, Table: []Name{{Host: amiiHostA, Endpoint: 21}}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	server.Register(func(*Token, []uint64) {}) // never polled: never runs
	client, err := Dial(pa, VNet{ID: 21, Tag: amiiRed, Table: []Name{{Host: amiiHostB, Endpoint: 20}}},
		Config{ReplyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	var returned []Returned
	client.OnReturn(func(r Returned) { returned = append(returned, r) })
	if err := client.Request(0, 0, 5); err != nil {
		t.Fatal(err)
	}
	for len(returned) == 0 {
		ready, err := client.Wait(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !ready {
			t.Fatal("a minute's Wait ended without the request's return")
		}
		if _, err := client.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if r := returned[0]; len(returned) != 1 || r.Reason != ReasonNoReply || r.Dest != 0 || len(r.Args) != 1 || r.Args[0] != 5 {
		t.Errorf("returned %+v", returned)
	}
}
