// Command remoteread is SSAM's split-phase remote read, run between two
// hosts of a veth lab over the real data path: host 1 owns an array of
// float64 words; host 0 issues reads of several words without waiting
// (each a single-cell SSAM request), counts them outstanding, and waits
// only when it needs the values — readDouble in Split-C on SSAM. It then
// times a remote store (a request that is acknowledged explicitly).
//
// Run it as root: go run ./examples/remoteread
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

func main() {
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("rread%d", os.Getpid())})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Down()
	h0, h1 := l.Hosts[0], l.Hosts[1]
	reader := openSSAM(h0, h1.MAC)
	defer reader.Close()
	owner := openSSAM(h1, h0.MAC)
	defer owner.Close()

	// The owner's memory and handlers; it polls in its own goroutine.
	memory := make([]float64, 1024)
	for i := range memory {
		memory[i] = math.Sqrt(float64(i))
	}
	var storeReply ssam.HandlerID
	readH := owner.Register(func(t *ssam.Token, data []byte) {
		var reply [12]byte
		copy(reply[:4], data[4:8]) // the reader's slot
		binary.BigEndian.PutUint64(reply[4:], math.Float64bits(memory[binary.BigEndian.Uint32(data)]))
		t.Reply(storeReply, reply[:])
	})
	writeH := owner.Register(func(t *ssam.Token, data []byte) {
		memory[binary.BigEndian.Uint32(data)] = math.Float64frombits(binary.BigEndian.Uint64(data[4:]))
	})
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			owner.Poll()
		}
	}()
	defer func() { stop.Store(true); <-done }()

	// The reader: readDouble with an outstanding-reads counter.
	var results [8]float64
	outstanding := 0
	storeReply = reader.Register(func(t *ssam.Token, data []byte) {
		results[binary.BigEndian.Uint32(data)] = math.Float64frombits(binary.BigEndian.Uint64(data[4:]))
		outstanding--
	})
	readDouble := func(index, slot uint32) {
		var req [8]byte
		binary.BigEndian.PutUint32(req[:], index)
		binary.BigEndian.PutUint32(req[4:], slot)
		outstanding++
		if err := reader.Request(0, readH, req[:]); err != nil {
			log.Fatal(err)
		}
	}
	start := time.Now()
	for slot := range uint32(len(results)) {
		readDouble(slot*slot, slot)
	}
	for outstanding > 0 { // sync: wait for the reads only now
		reader.Poll()
	}
	fmt.Printf("read 8 remote words split-phase in %v: %.3f\n", time.Since(start), results)

	// Remote stores, acknowledged explicitly by SSAM.
	const stores = 10000
	start = time.Now()
	for i := range stores {
		var req [12]byte
		binary.BigEndian.PutUint32(req[:], uint32(i%len(memory)))
		binary.BigEndian.PutUint64(req[4:], math.Float64bits(-1))
		if err := reader.Request(0, writeH, req[:]); err != nil {
			log.Fatal(err)
		}
	}
	if err := reader.Drain(10 * time.Second); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d remote stores in %v (%.2f µs each, window %d)\n", stores, time.Since(start),
		float64(time.Since(start).Microseconds())/stores, reader.Config().Window)
}

// openSSAM opens the data path on host h, admitting SSAM's VCs, and an
// SSAM endpoint with one connection to peer; it exits on an error.
func openSSAM(h *lab.Host, peer net.HardwareAddr) *endpoint {
	p := datapath.OnHost(h)
	raw, err := datapath.OpenConfig(p, loader.ModeAuto, 0, loader.Config{DstMAC: p.MAC, Admission: true}, ssam.VCI, ssam.VCI+1)
	if err != nil {
		log.Fatal(err)
	}
	am, err := ssam.Open(raw.Sock, peer, ssam.Config{})
	if err != nil {
		raw.Close()
		log.Fatal(err)
	}
	return &endpoint{Endpoint: am, raw: raw}
}

// endpoint is an SSAM endpoint and its data path.
type endpoint struct {
	*ssam.Endpoint
	raw *datapath.Endpoint
}

// Close closes the endpoint, then its data path.
func (e *endpoint) Close() error { return errors.Join(e.Endpoint.Close(), e.raw.Close()) }
