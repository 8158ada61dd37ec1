package ssam_test

import (
	"encoding/binary"
	"fmt"
	"log"
	"math"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/ssam"
)

// node is one side of a two-node cluster for the examples: an SSAM
// endpoint with connection 0 to the other node, over an in-memory link (on
// real hosts the link is an afxdp.Socket; nothing else changes).
type node struct {
	*ssam.Endpoint
	memory []float64 // the node's "global memory", read and written remotely
}

func twoNodes() (a, b *node) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		log.Fatal(err)
	}
	cfg := ssam.Config{MaxMessage: 8192}
	open := func(l *memlink.Link, peer []byte) *node {
		s, err := ssam.Open(l, peer, cfg) // connection 0 to peer, on ssam.VCI
		if err != nil {
			log.Fatal(err)
		}
		return &node{Endpoint: s, memory: make([]float64, 16)}
	}
	return open(la, lb.HardwareAddr()), open(lb, la.HardwareAddr())
}

// pollUntil polls both nodes (in a real cluster each polls on its own)
// until done reports true.
func pollUntil(a, b *node, done func() bool) {
	for !done() {
		pollOnce(a, b)
	}
}

// pollOnce polls both nodes once.
func pollOnce(a, b *node) {
	if _, err := a.Poll(); err != nil {
		log.Fatal(err)
	}
	if _, err := b.Poll(); err != nil {
		log.Fatal(err)
	}
}

// Split-phase remote read, as Split-C's readDouble on SSAM: the request
// handler at the owner replies with the word; the reply handler stores it
// and decrements the count of outstanding reads, which the reader waits on
// only when it needs the values (here, after issuing all the reads).
func Example_readDouble() {
	a, b := twoNodes()
	defer a.Close()
	defer b.Close()
	for i := range b.memory {
		b.memory[i] = math.Sqrt(float64(i))
	}
	var results [4]float64
	outstanding := 0

	var storeH ssam.HandlerID
	readH := b.Register(func(t *ssam.Token, data []byte) {
		index := binary.BigEndian.Uint32(data)
		slot := binary.BigEndian.Uint32(data[4:])
		var reply [12]byte
		binary.BigEndian.PutUint32(reply[:], slot)
		binary.BigEndian.PutUint64(reply[4:], math.Float64bits(b.memory[index]))
		if err := t.Reply(storeH, reply[:]); err != nil {
			log.Print(err)
		}
	})
	storeH = a.Register(func(t *ssam.Token, data []byte) {
		slot := binary.BigEndian.Uint32(data)
		results[slot] = math.Float64frombits(binary.BigEndian.Uint64(data[4:]))
		outstanding--
	})

	for slot, index := range []uint32{2, 3, 5, 7} {
		var req [8]byte
		binary.BigEndian.PutUint32(req[:], index)
		binary.BigEndian.PutUint32(req[4:], uint32(slot))
		outstanding++
		if err := a.Request(0, readH, req[:]); err != nil {
			log.Fatal(err)
		}
	}
	pollUntil(a, b, func() bool { return outstanding == 0 })
	fmt.Printf("%.4f\n", results)
	// Output: [1.4142 1.7321 2.2361 2.6458]
}

// Remote store: the request carries the address and the value; the owner's
// handler stores it and sends no reply, so SSAM acknowledges the request
// explicitly and the writer knows the store is done when its window drains.
func Example_remoteStore() {
	a, b := twoNodes()
	defer a.Close()
	defer b.Close()
	storeH := b.Register(func(t *ssam.Token, data []byte) {
		b.memory[binary.BigEndian.Uint32(data)] = math.Float64frombits(binary.BigEndian.Uint64(data[4:]))
	})
	for i, v := range []float64{3.25, -1.5} {
		var req [12]byte
		binary.BigEndian.PutUint32(req[:], uint32(10+i))
		binary.BigEndian.PutUint64(req[4:], math.Float64bits(v))
		if err := a.Request(0, storeH, req[:]); err != nil {
			log.Fatal(err)
		}
	}
	pollUntil(a, b, func() bool { return a.Outstanding(0) == 0 })
	fmt.Println(b.memory[10], b.memory[11], "acks:", b.Stats().Acks)
	// Output: 3.25 -1.5 acks: 2
}

// Bulk write of N bytes: longer messages travel as AAL5 PDUs, written by
// the application straight into the endpoint's next send buffer.
func Example_bulkWrite() {
	a, b := twoNodes()
	defer a.Close()
	defer b.Close()
	const n = 100_000
	received := make([]byte, 0, n)
	appendH := b.Register(func(t *ssam.Token, data []byte) { received = append(received, data...) })
	for off := 0; off < n; {
		buf := a.Buffer(0)
		for buf == nil { // the window is full: poll until there is room
			pollOnce(a, b)
			buf = a.Buffer(0)
		}
		k := min(8192, n-off)
		for i := range k {
			buf[i] = byte(off + i)
		}
		if err := a.RequestBuffered(0, appendH, k); err != nil {
			log.Fatal(err)
		}
		off += k
	}
	pollUntil(a, b, func() bool { return a.Outstanding(0) == 0 })
	ok := len(received) == n
	for i := range received {
		ok = ok && received[i] == byte(i)
	}
	fmt.Println(len(received), "bytes, intact:", ok)
	// Output: 100000 bytes, intact: true
}
