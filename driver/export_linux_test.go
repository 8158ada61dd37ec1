//go:build linux

package driver

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// PacketArrivals returns the frames the kernel queued to (or dropped at)
// the AF_PACKET socket of a device opened with OpenPacket since the last
// call (PACKET_STATISTICS, which resets on reading).
func PacketArrivals(d *Device) (uint64, error) {
	l, ok := d.link.(*packetLink)
	if !ok {
		return 0, fmt.Errorf("not an AF_PACKET device")
	}
	st, err := unix.GetsockoptTpacketStats(l.FD(), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0, err
	}
	return uint64(st.Packets), nil
}
