package daemon

import (
	"testing"

	"github.com/xam-project/xam/nicfw"
)

// Each connection gets a page of doorbells of its own, shared by its
// endpoints: another connection (another application, perhaps another
// user) can neither ring nor read its bits.
func TestDaemonBellsPerConnection(t *testing.T) {
	_, _, sa, _ := daemonPair(t, 0, 0)
	open := func(c *Conn, id nicfw.EndpointID) *Endpoint {
		t.Helper()
		ep, err := c.Open(OpenRequest{Endpoint: id, Tag: 7, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	conn := func() *Conn {
		t.Helper()
		c, err := Dial(sa)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := conn(), conn()
	a, b, other := open(c1, 20), open(c1, 21), open(c2, 22)
	pa, bitA := a.Bells()
	pb, bitB := b.Bells()
	po, bitO := other.Bells()
	switch {
	case pa == nil || pb == nil || po == nil || bitA == 0 || bitB == 0 || bitO == 0:
		t.Fatalf("an endpoint without its page of doorbells: %v %v %v, bits %d %d %d", pa, pb, po, bitA, bitB, bitO)
	case !pa.SamePage(pb) || bitA == bitB:
		t.Fatalf("one connection's endpoints: same page %v, bits %d and %d", pa.SamePage(pb), bitA, bitB)
	case pa.SamePage(po):
		t.Fatal("two connections share a page of doorbells")
	}
}
