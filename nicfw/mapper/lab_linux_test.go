package mapper

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestLab runs three mappers over real AF_XDP sockets on a three-host star
// (a bridge namespace between them), on the system clock: they converge on
// one table led by the lowest MAC; when that host stops, the other two
// drop it and the next lowest takes over.
func TestLab(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("map%d", os.Getpid()), Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	type host struct {
		h *lab.Host
		m *Mapper
	}
	var hosts []*host
	for i, h := range l.Hosts {
		_, sock := xdptest.Open(t, h.Do, h.Index, h.MAC, 0, 0)
		m, err := New(sock, Config{ProbeInterval: 20 * time.Millisecond, DeadAfter: 150 * time.Millisecond,
			Queue: i, Privileged: true})
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, &host{h: h, m: m})
	}

	lowest := func(hs []*host) *host {
		low := hs[0]
		for _, h := range hs[1:] {
			if bytes.Compare(h.h.MAC, low.h.MAC) < 0 {
				low = h
			}
		}
		return low
	}
	// converge polls hs until they all hold the same table listing them,
	// built by the lowest MAC.
	converge := func(hs []*host) Table {
		t.Helper()
		lead := lowest(hs)
		deadline := time.Now().Add(10 * time.Second)
		for {
			for _, h := range hs {
				if err := h.m.Poll(); err != nil {
					t.Fatal(err)
				}
			}
			ok := true
			first := hs[0].m.Table()
			for _, h := range hs {
				tab := h.m.Table()
				if len(tab.Hosts) != len(hs) || tab.Epoch != first.Epoch ||
					!bytes.Equal(tab.Leader, lead.h.MAC) || !bytes.Equal(h.m.Leader(), lead.h.MAC) {
					ok = false
					break
				}
				for _, o := range hs {
					if e, found := tab.Lookup(o.h.MAC); !found || e.Queue != o.m.cfg.Queue {
						ok = false
					}
				}
			}
			if ok {
				return first
			}
			if time.Now().After(deadline) {
				for _, h := range hs {
					t.Logf("%s %v: %s leader %v %+v", h.h.Name, h.h.MAC, show(h.m.Table()), h.m.Leader(), h.m.Stats())
				}
				t.Fatal("no convergence in 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	tab := converge(hosts)
	t.Logf("3 hosts: %s", show(tab))

	// The leader stops: the others notice and the next lowest MAC leads.
	gone := lowest(hosts)
	var rest []*host
	for _, h := range hosts {
		if h != gone {
			rest = append(rest, h)
		}
	}
	tab2 := converge(rest)
	if tab2.Epoch <= tab.Epoch {
		t.Fatalf("epoch %d after the leader stopped, %d before", tab2.Epoch, tab.Epoch)
	}
	t.Logf("2 hosts: %s", show(tab2))
	for _, h := range hosts {
		if st := h.m.Stats(); st.Malformed+st.Truncated != 0 {
			t.Errorf("%s: %+v", h.h.Name, st)
		}
	}
}
