package amii

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// spinEndpoint is a firmware-mode endpoint on memory of its own (no
// engine: the test puts descriptors itself), whose blocking wait counts
// its calls.
func spinEndpoint(t *testing.T, cfg Config) (*endpoint.Memory, *Endpoint, *atomic.Int64) {
	t.Helper()
	m, err := endpoint.NewMemory(endpoint.Config{TableSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	v, err := endpoint.Map(m.FD())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	blocks := new(atomic.Int64)
	a, err := newEndpoint(v, nil, func(d time.Duration) error {
		blocks.Add(1)
		time.Sleep(min(d, time.Millisecond))
		return nil
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, a, blocks
}

// TestSpin: a firmware-mode wait looks at the queues for Config.Spin
// before it blocks, and a message that comes meanwhile ends it without a
// block; with a negative Spin it blocks at once.
func TestSpin(t *testing.T) {
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	m, a, blocks := spinEndpoint(t, Config{Spin: time.Hour})
	put := make(chan error, 1)
	go func() {
		time.Sleep(time.Millisecond) // let the wait start spinning (it works either way)
		put <- m.Put(endpoint.RequestReceive, &endpoint.Descriptor{Class: endpoint.ClassShort, Handler: 0, Dest: endpoint.NoIndex})
	}()
	ready, err := a.Wait(time.Hour)
	// The memory and its view are two mappings: the race detector sees no
	// order between them, so the putter is waited for before the memory
	// is closed.
	if perr := <-put; perr != nil {
		t.Fatal(perr)
	}
	if !ready || err != nil {
		t.Fatalf("Wait: %v, %v", ready, err)
	}
	if n := blocks.Load(); n != 0 {
		t.Errorf("a message that came while spinning: %d blocks, want 0", n)
	}

	_, a, blocks = spinEndpoint(t, Config{Spin: -1})
	if ready, err := a.Wait(5 * time.Millisecond); ready || err != nil {
		t.Fatalf("Wait with nothing coming: %v, %v", ready, err)
	}
	if blocks.Load() == 0 {
		t.Error("a wait without spinning did not block")
	}
	if a.Config().Spin != -1 {
		t.Errorf("Spin %v", a.Config().Spin)
	}
	if _, b, _ := spinEndpoint(t, Config{}); b.Config().Spin != DefaultSpin {
		t.Errorf("default Spin %v, want %v", b.Config().Spin, DefaultSpin)
	}
}
