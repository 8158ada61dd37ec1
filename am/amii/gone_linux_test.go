//go:build linux

package amii

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// TestDaemonGone: in firmware mode, once the daemon stops, Wait and every
// later call that sends, polls or waits return an error that is both
// ErrClosed (as grim's is) and daemon.ErrClosed; Close then succeeds.
func TestDaemonGone(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	sock := filepath.Join(t.TempDir(), "fw.sock")
	d, err := daemon.New(la, daemon.Config{Engine: nicfw.EngineConfig{Host: amiiHostA}, Socket: sock, Sleep: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop := func() error {
		if cancel == nil {
			return nil
		}
		cancel()
		cancel = nil
		return <-done
	}
	defer stop()
	a, err := Dial(sock, VNet{ID: 5, Tag: amiiRed, Table: []Name{{Host: amiiHostA, Endpoint: 6}}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("daemon: %v", err)
	}
	both := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) || !errors.Is(err, daemon.ErrClosed) {
			t.Errorf("%s once the daemon stopped: %v, want ErrClosed and daemon.ErrClosed", what, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := a.Wait(100 * time.Millisecond)
		if err != nil {
			both("Wait", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Wait does not notice that the daemon stopped")
		}
	}
	_, perr := a.Poll()
	both("Poll", perr)
	both("Request", a.Request(0, 1))
	both("Drain", a.Drain(time.Millisecond))
	if err := a.Close(); err != nil {
		t.Errorf("Close once the daemon stopped: %v", err)
	}
}
