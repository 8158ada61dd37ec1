package driver_test

import (
	"fmt"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
)

// Two devices on an in-memory link: A writes an SSAM message into its next
// send slot and traps; B receives the cell into its connection's ring.
func Example() {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer la.Close()
	defer lb.Close()
	a, err := driver.Open(la, driver.Config{
		Conns:  []driver.ConnSpec{{Peer: lb.HardwareAddr(), VPI: 1, SendVCI: 42, RecvVCI: 40}},
		NoLock: true, // examples run without RLIMIT_MEMLOCK
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := driver.Open(lb, driver.Config{
		Conns:  []driver.ConnSpec{{Peer: la.HardwareAddr(), VPI: 1, SendVCI: 40, RecvVCI: 42}},
		NoLock: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	// The application writes where the trap will pick the cell up.
	off := a.NextSend(0)
	slot := a.SendArea(0)[off*cells.PayloadSize:][:cells.PayloadSize]
	cells.EncodeSSAM(slot, 0, 7, []byte("remote store"))
	if err := a.Send(0, off, driver.EOM); err != nil { // two integers and a flag
		fmt.Println(err)
		return
	}

	n, err := b.Recv(b.RecvBatch())
	fmt.Println("received", n, err)
	cell, _ := b.Take(0)
	msg := cells.SSAMCell(cell.Payload())
	fmt.Println(cell.VC(cells.UNI), cell.EndOfMessage(), msg.Check(), msg.Handler(), string(msg.Data()))

	// A trap with a connection index out of range sends nothing.
	fmt.Println(a.Send(5, off, 0))
	// Output:
	// received 1 <nil>
	// 1/42 true <nil> 7 remote store
	// driver: connection 5 (the device has 1): bad connection index
}
