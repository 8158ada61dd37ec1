package amii_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/amii"
)

// Handler ids that both sides agree on: the receiver puts its handlers at
// these ids (Handle), so a sender need not know the order it registers
// them in.
const (
	shout  = 1 // B: a medium request; replies with the bytes in capitals
	sum    = 2 // B: a bulk request; replies with the sum of the stored bytes
	echoed = 1 // A: the medium reply
	summed = 2 // A: the short reply
)

// Two AM-II endpoints in inline mode, on two hosts joined by an in-memory
// link (on real hosts the link is an afxdp.Socket, or the endpoints are
// opened through a firmware daemon with amii.Dial; nothing else changes).
// A sends a medium request, copied once into a staging slot and handed to
// B's handler in place, and a bulk Store, which writes a region of A's
// staging area into B's and runs its handler there once all of it is
// stored.
func Example() {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	const hostA, hostB amii.HostID = 1, 2
	open := func(self amii.HostID, l *memlink.Link, peer amii.HostID, peerMAC net.HardwareAddr) (*amii.Endpoint, error) {
		return amii.Open(l, amii.Inline{Host: self, Hosts: map[amii.HostID]net.HardwareAddr{peer: peerMAC}},
			amii.VNet{ID: 16, Tag: 42, Table: []amii.Name{{Host: peer, Endpoint: 16}}}, amii.Config{})
	}
	a, err := open(hostA, la, hostB, lb.HardwareAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := open(hostB, lb, hostA, la.HardwareAddr())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	answers := 0
	handlers := []error{
		b.HandleMedium(shout, func(t *amii.Token, _ []uint64, data []byte) {
			if err := t.ReplyMedium(echoed, bytes.ToUpper(data)); err != nil {
				log.Print(err)
			}
		}),
		b.HandleMedium(sum, func(t *amii.Token, args []uint64, data []byte) {
			total := uint64(0)
			for _, c := range data {
				total += uint64(c)
			}
			fmt.Printf("stored %d bytes at %d\n", len(data), args[0])
			if err := t.Reply(summed, total); err != nil {
				log.Print(err)
			}
		}),
		a.HandleMedium(echoed, func(_ *amii.Token, _ []uint64, data []byte) {
			fmt.Printf("reply: %s\n", data)
			answers++
		}),
		a.Handle(summed, func(_ *amii.Token, args []uint64) {
			fmt.Println("sum:", args[0])
			answers++
		}),
	}
	if err := errors.Join(handlers...); err != nil {
		log.Fatal(err)
	}
	a.OnReturn(func(r amii.Returned) { log.Print("returned: ", r) })

	if err := a.RequestMedium(0, shout, []byte("hello, AM-II")); err != nil {
		log.Fatal(err)
	}
	region := a.Staging()[:10000]
	for i := range region {
		region[i] = 1
	}
	if err := a.Store(amii.Bulk{Dest: 0, Local: 0, Remote: 5000, Length: 10000, Handler: sum, Args: []uint64{5000}}); err != nil {
		log.Fatal(err)
	}
	// Each host polls its own endpoint (here one goroutine plays both).
	for answers < 2 {
		if _, err := b.Poll(); err != nil {
			log.Fatal(err)
		}
		if _, err := a.Poll(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// reply: HELLO, AM-II
	// stored 10000 bytes at 5000
	// sum: 10000
}
