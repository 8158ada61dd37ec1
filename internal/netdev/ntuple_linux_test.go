package netdev

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/xam-project/xam/internal/netnstest"
)

// TestSteerLayout: the request has the kernel's layout (struct
// ethtool_rxnfc: 192 bytes on 64-bit Linux, the flow spec at 16, its ring
// cookie at 152 and location at 160 within it), and each rule puts its
// value and mask where the kernel reads them.
func TestSteerLayout(t *testing.T) {
	var r rxnfc
	if unsafe.Sizeof(r) != 192 || unsafe.Offsetof(r.fs) != 16 || unsafe.Offsetof(r.fs.ringCookie) != 152 || unsafe.Offsetof(r.fs.location) != 160 {
		t.Fatalf("struct ethtool_rxnfc: size %d, fs at %d, ring_cookie at %d, location at %d", unsafe.Sizeof(r), unsafe.Offsetof(r.fs),
			unsafe.Offsetof(r.fs.ringCookie), unsafe.Offsetof(r.fs.location))
	}
	if unsafe.Sizeof(ifreqPtr{}) != 40 {
		t.Fatalf("struct ifreq: %d bytes", unsafe.Sizeof(ifreqPtr{}))
	}
	for _, c := range []struct {
		port uint16
		ipv6 bool
		flow uint32
		at   int
		val  uint16
		what string
	}{
		{0, false, 0x12, 12, 0x88b5, "flow-type ether proto 0x88b5 action 3"},
		{18553, false, 0x02, 10, 18553, "flow-type udp4 dst-port 18553 action 3"},
		{18553, true, 0x06, 34, 18553, "flow-type udp6 dst-port 18553 action 3"},
	} {
		fs, what := steerSpec(0x88b5, c.port, c.ipv6, 3)
		if fs.flowType != c.flow || binary.BigEndian.Uint16(fs.hU[c.at:]) != c.val || binary.BigEndian.Uint16(fs.mU[c.at:]) != 0xffff ||
			fs.ringCookie != 3 || fs.location != rxClsLocAny || what != c.what {
			t.Errorf("%s: %+v", what, fs)
		}
	}
}

// TestSteerRefused: a veth takes no n-tuple rule; Steer says so.
func TestSteerRefused(t *testing.T) {
	p := netnstest.NewVethPair(t)
	err := p.A.Do(func() error {
		r, err := Steer(p.A.Link, 0x88b5, 0, false, 0)
		if r != nil {
			r.Remove()
		}
		return err
	})
	if !errors.Is(err, ErrNoNtuple) {
		t.Fatalf("Steer on a veth: %v, want ErrNoNtuple", err)
	}
	t.Log(err)
}
