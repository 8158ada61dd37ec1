package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const twoHosts = `# two machines
rendezvous alpha:7170
0 alpha enp1s0 02:00:00:00:00:01   # rank 0
1 beta  enp1s0 02:00:00:00:00:02

`

func TestParseHostfile(t *testing.T) {
	h, err := ParseHostfile(strings.NewReader(twoHosts))
	if err != nil {
		t.Fatal(err)
	}
	if h.Rendezvous != "alpha:7170" || len(h.Ranks) != 2 || h.Ranks[1].Node != "beta" ||
		h.Ranks[0].Device != "enp1s0" || h.Ranks[1].MAC.String() != "02:00:00:00:00:02" {
		t.Errorf("%+v", h)
	}
	// Order of lines does not matter; the MAC is optional; the digest
	// follows the contents, not the comments.
	h2, err := ParseHostfile(strings.NewReader("1 beta enp1s0 02:00:00:00:00:02\n0 alpha enp1s0 02:00:00:00:00:01\nrendezvous alpha:7170 # here\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h2.Digest != h.Digest {
		t.Errorf("digests %s and %s of the same job", h.Digest, h2.Digest)
	}
	h3, err := ParseHostfile(strings.NewReader("rendezvous [::1]:7170\n0 a eth0\n1 a eth0\n2 b eth1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h3.Ranks[2].MAC != nil || h3.Digest == h.Digest {
		t.Errorf("%+v", h3)
	}
}

func TestParseHostfileErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no rendezvous line"},
		{"rendezvous a:1\n", "no ranks"},
		{"0 a eth0\n", "no rendezvous line"},
		{"rendezvous a:1\nrendezvous a:2\n0 a eth0\n", "line 2: a second rendezvous line"},
		{"rendezvous a\n0 a eth0\n", "line 1: rendezvous \"a\""},
		{"rendezvous a:0\n0 a eth0\n", "port \"0\" is not 1 to 65535"},
		{"rendezvous a:http\n0 a eth0\n", "is not 1 to 65535"},
		{"rendezvous :7170\n0 a eth0\n", "no host"},
		{"rendezvous a:1 b\n", "want: rendezvous HOST:PORT"},
		{"rendezvous a:1\n0 a\n", "line 2: 2 fields"},
		{"rendezvous a:1\n0 a eth0 02:00:00:00:00:01 x\n", "5 fields"},
		{"rendezvous a:1\nx a eth0\n", "rank \"x\""},
		{"rendezvous a:1\n-1 a eth0\n", "rank \"-1\""},
		{"rendezvous a:1\n01 a eth0\n", "rank \"01\""},
		{"rendezvous a:1\n0 a eth0\n0 b eth0\n", "line 3: rank 0 appears twice"},
		{"rendezvous a:1\n0 a eth0\n2 b eth0\n", "2 ranks but no line for rank 1"},
		{"rendezvous a:1\n0 a/b eth0\n", "node \"a/b\""},
		{"rendezvous a:1\n0 a averyveryverylongdevice\n", "device"},
		{"rendezvous a:1\n0 a eth0 zz:00\n", "MAC \"zz:00\""},
		{"rendezvous a:1\n0 a eth0 00:00:00:00:00:00:00:01\n", "MAC"},
		{"rendezvous a:1\n0 a eth0\n" + strings.Repeat("x", 5000) + "\n", "token too long"},
	} {
		_, err := ParseHostfile(strings.NewReader(tc.in))
		if err == nil || !errors.Is(err, errHostfile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHostfile(%q): %v, want %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParseHostfile: any file parses or fails with a hostfile error; a
// parsed file has ranks 0..n-1 and a rendezvous.
func FuzzParseHostfile(f *testing.F) {
	f.Add([]byte(twoHosts))
	f.Add([]byte("rendezvous [::1]:7170\n0 a eth0\n1 a eth0\n2 b eth1\n"))
	f.Add([]byte("rendezvous a:1\n0 a eth0\n0 b eth0\n"))
	f.Add([]byte("rendezvous a:1\n65535 a eth0\n"))
	f.Add([]byte("# nothing\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ParseHostfile(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, errHostfile) {
				t.Fatalf("error not a hostfile error: %v", err)
			}
			return
		}
		if h.Rendezvous == "" || len(h.Ranks) == 0 || len(h.Ranks) > MaxRanks || h.Digest == "" {
			t.Fatalf("parsed %+v", h)
		}
		for r, hr := range h.Ranks {
			if hr.Node == "" || hr.Device == "" {
				t.Fatalf("rank %d: %+v", r, hr)
			}
		}
	})
}

// hostfileJob writes a hostfile of nodes (one rank each, in order) with a
// free rendezvous port on 127.0.0.1.
func hostfileJob(t *testing.T, nodes ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "rendezvous 127.0.0.1:%d\n", port)
	for r, n := range nodes {
		fmt.Fprintf(&b, "%d %s veth%d 02:00:00:00:01:%02x\n", r, n, r, r)
	}
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// eachRank runs f for every rank of the hostfile at path, each in its own
// goroutine with its own Job, and returns their errors.
func eachRank(t *testing.T, path string, size int, f func(j *Job) error) []error {
	t.Helper()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			j, err := FromHostfile(ctx, path, r)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = f(j)
		})
	}
	wg.Wait()
	return errs
}

// TestHostfileExchange: three ranks on two nodes put, fence, get and
// exchange cards through rank 0's rendezvous, as under Slurm.
func TestHostfileExchange(t *testing.T) {
	path := hostfileJob(t, "alpha", "alpha", "beta")
	errs := eachRank(t, path, 3, func(j *Job) error {
		if j.Launcher != "hostfile" || j.Size != 3 || j.Device != fmt.Sprintf("veth%d", j.Rank) {
			return fmt.Errorf("job %+v", j)
		}
		wantNode, wantLocal := []int{0, 0, 1}[j.Rank], []int{0, 1, 0}[j.Rank]
		if j.NodeID != wantNode || j.HostID != wantNode || j.LocalRank != wantLocal || j.Nodes[j.NodeID] != j.Node {
			return fmt.Errorf("rank %d: %v", j.Rank, j)
		}
		ctx := context.Background()
		if err := j.Put("greeting", []byte(greeting(j.Rank))); err != nil {
			return err
		}
		if err := j.Put("big", bigValue(j.Rank)); err != nil {
			return err
		}
		if err := j.Put("greeting", nil); err == nil {
			return errors.New("a key put twice was accepted")
		}
		if err := j.Fence(ctx); err != nil {
			return err
		}
		for r := range j.Size {
			v, err := j.Get(r, "greeting")
			if err != nil || string(v) != greeting(r) {
				return fmt.Errorf("rank %d's greeting: %q %v", r, v, err)
			}
			if v, err := j.Get(r, "big"); err != nil || !bytes.Equal(v, bigValue(r)) {
				return fmt.Errorf("rank %d's big value: %d bytes, %v", r, len(v), err)
			}
		}
		if _, err := j.Get(1, "never"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("Get of a key never put: %v", err)
		}
		if _, err := j.Get(3, "greeting"); err == nil {
			return errors.New("Get of rank 3 of 3 accepted")
		}
		cards, err := j.Exchange(ctx, Card{MAC: j.MAC.String(), Device: j.Device, Queue: j.LocalRank})
		if err != nil {
			return err
		}
		for r, c := range cards {
			if c.Rank != r || c.HostID != []int{0, 0, 1}[r] || c.Device != fmt.Sprintf("veth%d", r) {
				return fmt.Errorf("card of rank %d: %+v", r, c)
			}
		}
		return j.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestHostfileFailures: a rank that leaves without closing fails the
// others' fence at once (ErrTaskLost), an abort reaches every other rank
// (ErrAborted), a rank that never comes makes the fence time out.
func TestHostfileFailures(t *testing.T) {
	t.Run("lost", func(t *testing.T) {
		path := hostfileJob(t, "a", "b", "c")
		errs := eachRank(t, path, 3, func(j *Job) error {
			if j.Rank == 2 {
				j.kv.(*rvClient).conn.Close() // dies without a word
				return nil
			}
			err := j.Fence(context.Background())
			j.Close()
			return err
		})
		for r := range 2 {
			if !errors.Is(errs[r], ErrTaskLost) || !strings.Contains(errs[r].Error(), "rank 2's connection ended") {
				t.Errorf("rank %d: %v, want rank 2 lost", r, errs[r])
			}
		}
	})
	t.Run("abort", func(t *testing.T) {
		path := hostfileJob(t, "a", "b", "c")
		errs := eachRank(t, path, 3, func(j *Job) error {
			defer j.Close()
			if j.Rank == 1 {
				return j.Abort("rank 1 gives up")
			}
			return j.Fence(context.Background())
		})
		for _, r := range []int{0, 2} {
			if !errors.Is(errs[r], ErrAborted) || !strings.Contains(errs[r].Error(), "by rank 1: rank 1 gives up") {
				t.Errorf("rank %d: %v, want the abort", r, errs[r])
			}
		}
		if errs[1] != nil {
			t.Errorf("rank 1's Abort: %v", errs[1])
		}
	})
	t.Run("timeout", func(t *testing.T) {
		path := hostfileJob(t, "a", "b")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		j, err := FromHostfile(ctx, path, 0) // rank 1 never comes
		if err != nil {
			t.Fatal(err)
		}
		j.FenceTimeout = 200 * time.Millisecond
		err = j.Fence(context.Background())
		if !errors.Is(err, ErrFenceTimeout) || !strings.Contains(err.Error(), "never reached the fence") {
			t.Errorf("Fence: %v, want ErrFenceTimeout", err)
		}
		if err := j.Put("k", nil); err == nil {
			t.Error("Put after a timed-out fence accepted")
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer ccancel()
		j.kv.close(cctx) // rank 0 waits for rank 1 until its context ends
	})
	t.Run("other hostfile", func(t *testing.T) {
		path := hostfileJob(t, "a", "b")
		b, _ := os.ReadFile(path)
		other := filepath.Join(t.TempDir(), "other")
		os.WriteFile(other, bytes.Replace(b, []byte("veth1"), []byte("eth9"), 1), 0o644)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		j, err := FromHostfile(ctx, path, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer j.kv.(*rvClient).server.shutdown()
		_, err = FromHostfile(ctx, other, 1)
		if err == nil || !strings.Contains(err.Error(), "hostfile differs from rank 0's") {
			t.Errorf("rank 1 with another hostfile: %v", err)
		}
	})
	t.Run("no rank 0", func(t *testing.T) {
		path := hostfileJob(t, "a", "b")
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := FromHostfile(ctx, path, 1)
		if err == nil || !strings.Contains(err.Error(), "is rank 0 running?") {
			t.Errorf("rank 1 alone: %v", err)
		}
	})
}
