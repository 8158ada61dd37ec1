package memlink_test

import (
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/afxdp/memlink"
)

func ExampleNewPair() {
	a, b, err := memlink.NewPair(memlink.Options{Loss: 0.5, Seed: 1})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	defer b.Close()

	var batch [][]byte
	for seq := range 8 {
		f := make([]byte, 60)
		copy(f[0:6], b.HardwareAddr())
		copy(f[6:12], a.HardwareAddr())
		binary.BigEndian.PutUint16(f[12:14], 0x88B5)
		f[14] = byte(seq)
		batch = append(batch, f)
	}
	a.Send(batch)

	frames := make([][]byte, b.BatchSize())
	n, _ := b.Recv(frames)
	var got []byte
	for _, f := range frames[:n] {
		got = append(got, f[14])
	}
	fmt.Println("received", got, "lost", b.Faults().Lost)
	// Output: received [0 2 4 6] lost 4
}
