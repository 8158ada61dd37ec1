//go:build linux

package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon/daemontest"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestStorage: a storage endpoint on host 2, on a thread of its own beside
// host 2's application, both through host 2's engine daemon; host 1's
// application and host 2's read and write blocks on it at once, found by
// name, with 5% of the frames lost.
func TestStorage(t *testing.T) {
	storageBody(t, xdptest.Hub(t, 2, memlink.Options{Loss: 0.05, Seed: 21}))
}

// TestStorageOverAFXDP is the same over AF_XDP on a two-host lab star.
func TestStorageOverAFXDP(t *testing.T) {
	storageBody(t, xdptest.Star(t, "stor", 2, 0.05))
}

func storageBody(t *testing.T, links []afxdp.Link) {
	sockets := daemontest.Start(t, links, func(nicfw.HostID) nicfw.EngineConfig {
		return nicfw.EngineConfig{Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}}
	})
	peers := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}, {Host: 2, Endpoint: 48}}
	dial := func(self int) *grim.Endpoint {
		ep, err := grim.Dial(sockets[peers[self].Host-1], grim.Config{Peers: peers, Self: self})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	central, local, dev := dial(0), dial(1), dial(2)
	path := filepath.Join(t.TempDir(), "blocks")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const bs, blocks = 4096, 64

	// The store: registered by name (the central, host 1, must run while
	// it publishes), then served on its own thread.
	var stop atomic.Bool
	var wg sync.WaitGroup
	ready := make(chan error, 1)
	var store *Store
	wg.Go(func() {
		var err error
		store, err = New(dev, f, Config{Name: "disk", BlockSize: bs, Blocks: blocks})
		ready <- err
		if err == nil {
			if err := store.Serve(&stop); err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	if err := pollUntil(central, ready); err != nil {
		t.Fatal(err)
	}

	// Host 2's application, beside the store, uses blocks 32..63.
	localDone := make(chan error, 1)
	wg.Go(func() { localDone <- useStore(local, 32, 7) })
	// Host 1's, blocks 0..31.
	if err := useStore(central, 0, 3); err != nil {
		t.Fatal(err)
	}
	if err := pollUntil(central, localDone); err != nil { // the central runs for host 2's publish
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	// The file holds what was written, block by block.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for blk := range blocks {
		seed := byte(3)
		if blk >= 32 {
			seed = 7
		}
		if want := blockPattern(blk, bs, seed); !bytes.Equal(b[blk*bs:(blk+1)*bs], want) {
			t.Errorf("block %d of the file is not what was written", blk)
		}
	}
	if st := store.Stats(); st.Writes == 0 || st.Reads == 0 || st.Refused != 2 {
		t.Errorf("store stats %+v, want 2 refused", st)
	}
}

// pollUntil runs ep until done yields.
func pollUntil(ep *grim.Endpoint, done <-chan error) error {
	for {
		select {
		case err := <-done:
			return err
		default:
			if _, err := ep.Poll(); err != nil {
				return err
			}
		}
	}
}

// useStore publishes ep, opens the store "disk" and writes and reads back
// blocks from..from+31 in runs of 1, 3 and 12 blocks; it also asks for
// blocks outside the store and for more than a message carries.
func useStore(ep *grim.Endpoint, from int, seed byte) error {
	if err := ep.Publish(); err != nil {
		return err
	}
	c, err := Open(ep, "disk", 60, 4096, 30*time.Second)
	if err != nil {
		return err
	}
	for blk := from; blk < from+32; {
		n := min([]int{1, 3, 12}[blk%3], from+32-blk)
		var data []byte
		for i := range n {
			data = append(data, blockPattern(blk+i, 4096, seed)...)
		}
		if err := c.Write(blk, data); err != nil {
			return err
		}
		got := make([]byte, len(data))
		if err := c.Read(blk, got); err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return errors.New("read back other bytes than written")
		}
		blk += n
	}
	if err := c.Read(63, make([]byte, 2*4096)); !errors.Is(err, ErrRange) {
		return errors.Join(errors.New("reading past the end"), err)
	}
	if err := c.Write(60, make([]byte, 100)); !errors.Is(err, ErrShape) {
		return errors.Join(errors.New("writing a part of a block"), err)
	}
	if err := c.Read(-1, make([]byte, 4096)); !errors.Is(err, ErrRange) {
		return errors.Join(errors.New("reading block -1"), err)
	}
	if err := c.Write(-1, make([]byte, 4096)); !errors.Is(err, ErrRange) {
		return errors.Join(errors.New("writing block -1"), err)
	}
	return nil
}

func blockPattern(blk, bs int, seed byte) []byte {
	b := make([]byte, bs)
	for i := range b {
		b[i] = byte(blk*31+i*7) ^ seed
	}
	return b
}
