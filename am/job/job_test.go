package job

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/nicfw"
)

func TestPickID(t *testing.T) {
	used := map[nicfw.EndpointID]bool{16: true, 18: true, 40: true}
	for _, tc := range []struct {
		width, local int
		want         nicfw.EndpointID
	}{
		{1, 0, 17}, {1, 1, 19}, {1, 2, 20},
		{16, 0, 48}, {16, 1, 64}, // 16..31 and 32..47 hold used ids
	} {
		got, err := pickID(used, 16, tc.width, tc.local, 0, 0)
		if err != nil || got != tc.want {
			t.Errorf("pickID(width %d, local %d) = %d, %v; want %d", tc.width, tc.local, got, err, tc.want)
		}
	}
	// A retry starts at a place drawn from the tag: two jobs part ways,
	// and the range is still free and aligned.
	a, _ := pickID(used, 16, 16, 0, 1, 0x1234_5678_9abc_def0)
	b, _ := pickID(used, 16, 16, 0, 1, 0x0fed_cba9_8765_4321)
	if a == b || (a-16)%16 != 0 || (b-16)%16 != 0 || a < 48 || b < 48 {
		t.Errorf("retries of two jobs at %d and %d", a, b)
	}
	if _, err := pickID(used, 0xfff8, 16, 0, 0, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("no room for a range: %v", err)
	}
	full := map[nicfw.EndpointID]bool{}
	for id := 0xff00; id < 1<<16; id++ {
		full[nicfw.EndpointID(id)] = true
	}
	if _, err := pickID(full, 0xff00, 1, 0, 0, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("a full daemon: %v", err)
	}
}

func TestSSAMConns(t *testing.T) {
	for rank := range 4 {
		s := &SSAM{Job: &cluster.Job{Rank: rank, Size: 4}}
		conns := map[int]bool{}
		for r := range 4 {
			c := s.Conn(r)
			if r == rank {
				if c != -1 {
					t.Errorf("rank %d: Conn(itself) = %d", rank, c)
				}
				continue
			}
			if c < 0 || c > 2 || conns[c] || s.Rank(c) != r {
				t.Errorf("rank %d: Conn(%d) = %d, Rank of it %d", rank, r, c, s.Rank(c))
			}
			conns[c] = true
		}
		if s.Conn(4) != -1 || s.Conn(-1) != -1 || s.Rank(3) != -1 || s.Rank(-1) != -1 {
			t.Errorf("rank %d: out of range not refused", rank)
		}
	}
}

func TestConfigMode(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want Mode
		err  string
	}{
		{Config{}, Inline, ""},
		{Config{Socket: "/x.sock"}, Firmware, ""},
		{Config{Mode: Firmware}, Firmware, ""},
		{Config{Mode: "bogus"}, "", `mode "bogus"`},
	} {
		m, err := tc.cfg.mode()
		if m != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %q, %v; want %q, %q", tc.cfg, m, err, tc.want, tc.err)
		}
	}
	j := &cluster.Job{}
	if _, err := (&Config{}).device(j); !errors.Is(err, ErrConfig) {
		t.Errorf("inline without a device: %v", err)
	}
	if _, err := OpenSSAM(context.Background(), j, Config{Mode: Firmware}); !errors.Is(err, ErrConfig) {
		t.Errorf("SSAM in firmware mode: %v", err)
	}
}

// hostfileJobs joins size ranks of a hostfile job on this machine, one
// node per rank, meeting at a free port.
func hostfileJobs(t *testing.T, size int) []*cluster.Job {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	text := "rendezvous " + addr + "\n"
	for r := range size {
		text += fmt.Sprintf("%d node%d eth0\n", r, r)
	}
	h, err := cluster.ParseHostfile(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]*cluster.Job, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			jobs[r], errs[r] = h.Join(ctx, r)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() { j.Close() })
		}
		wg.Wait()
	})
	return jobs
}

// TestOpenFailsEverywhere: ranks whose daemons are missing (firmware
// mode, no socket there) fail, and every rank's open says which rank, and
// why, rather than wait.
func TestOpenFailsEverywhere(t *testing.T) {
	jobs := hostfileJobs(t, 3)
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for r, j := range jobs {
		wg.Go(func() {
			cfg := Config{Socket: fmt.Sprintf("%s/fw-%d.sock", t.TempDir(), r)}
			_, errs[r] = OpenAMII(context.Background(), j, cfg)
		})
	}
	wg.Wait()
	for r, err := range errs {
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Rank != 0 || oe.Others != 2 || oe.API != "AM-II" || oe.Node != "node0" ||
			!strings.Contains(err.Error(), "rank 0 (node node0) could not open its AM-II endpoint: job: the node's daemon (xam fw) at ") {
			t.Errorf("rank %d: %v", r, err)
			continue
		}
		if (oe.Err != nil) != (r == 0) {
			t.Errorf("rank %d: its own error %v", r, oe.Err)
		}
	}
}
