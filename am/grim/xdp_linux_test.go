package grim

import (
	"fmt"
	"os"
	"testing"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMOverAFXDP is TestGRIM's body over real AF_XDP sockets on a
// four-host star (a bridge namespace between the hosts), xam's XDP
// program dropping 10% of the frames at every host.
func TestGRIMOverAFXDP(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("grim%d", os.Getpid()), Hosts: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	var links []afxdp.Link
	for i, h := range l.Hosts {
		_, sock := xdptest.Open(t, h.Do, h.Index, h.MAC, 0.10, uint64(i+1))
		links = append(links, sock)
	}
	grimBody(t, links)
}
