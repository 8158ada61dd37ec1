package pmi2

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeServer is a small in-process stand-in for a PMI-2 server, for the
// client's error paths: the tests that claim PMI-2 works use the real
// slurmstepd (slurm_linux_test.go).
type fakeServer struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// newFake returns a client's end and the fake's.
func newFake(t *testing.T) (net.Conn, *fakeServer) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, &fakeServer{t: t, conn: b, r: bufio.NewReader(b)}
}

// init answers the version line with answer.
func (s *fakeServer) init(answer string) error {
	line, err := s.r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != initLine {
		s.t.Errorf("init line %q", line)
	}
	_, err = s.conn.Write([]byte(answer))
	return err
}

// expect reads a request, checks its command, and writes answer raw.
func (s *fakeServer) expect(cmd, answer string) (Message, error) {
	m, err := ReadMessage(s.r)
	if err != nil {
		return m, err
	}
	if m.Cmd != cmd {
		s.t.Errorf("request %q, want %s", m, cmd)
	}
	if answer != "" {
		_, err = s.conn.Write([]byte(answer))
	}
	return m, err
}

// frame returns body with its length field.
func frame(body string) string {
	b, _ := Encode(mustParse(body))
	return string(b)
}

func mustParse(body string) Message {
	m, err := Parse([]byte(body))
	if err != nil {
		panic(err)
	}
	return m
}

const okInit = "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"

// handshake runs a good handshake on the fake's side.
func (s *fakeServer) handshake(rank, size string) {
	if err := s.init(okInit); err != nil {
		s.t.Error(err)
		return
	}
	m, err := s.expect("fullinit", frame("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank="+rank+
		";size="+size+";appnum=-1;debugged=FALSE;pmiverbose=FALSE;spawner-jobid=3.1;"))
	if err != nil {
		s.t.Error(err)
		return
	}
	if j, _ := m.Get("pmijobid"); j != "7.0" {
		s.t.Errorf("pmijobid %q", j)
	}
	if _, err := s.expect("job-getid", frame("cmd=job-getid-response;rc=0;jobid=7.0;")); err != nil {
		s.t.Error(err)
	}
}

func TestClientHandshake(t *testing.T) {
	conn, s := newFake(t)
	go s.handshake("2", "4")
	c, err := NewClient(context.Background(), conn, "7.0", 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Init != (Init{Rank: 2, Size: 4, AppNum: -1, SpawnerJobID: "3.1", JobID: "7.0"}) {
		t.Errorf("init %+v", c.Init)
	}
	go s.expect("kvs-get", frame("cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b;"))
	if v, ok, err := c.Get(context.Background(), "k"); v != "a;b" || !ok || err != nil {
		t.Errorf("Get = %q %v %v", v, ok, err)
	}
	if err := c.Put(context.Background(), "k", "a;b"); err == nil {
		t.Error("Put of a value with ';' accepted")
	}
	go s.expect("finalize", frame("cmd=finalize-response;rc=0;"))
	if err := c.Finalize(context.Background()); err != nil {
		t.Error(err)
	}
	if err := c.Fence(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Fence after Finalize: %v", err)
	}
}

// TestClientHandshakeErrors: each bad answer of a server is a clear error.
func TestClientHandshakeErrors(t *testing.T) {
	cases := []struct {
		name  string
		serve func(s *fakeServer)
		want  string
	}{
		{"refused", func(s *fakeServer) { s.init("cmd=response_to_init rc=1 pmi_version=1 pmi_subversion=1\n") }, "refused PMI-2"},
		{"closed", func(s *fakeServer) { s.r.ReadString('\n'); s.conn.Close() }, "unexpected EOF"},
		{"fullinit rc", func(s *fakeServer) {
			s.init(okInit)
			s.expect("fullinit", frame("cmd=fullinit-response;rc=3;errmsg=no pmijobid;"))
		}, "fullinit failed: rc=3 no pmijobid"},
		{"wrong answer", func(s *fakeServer) {
			s.init(okInit)
			s.expect("fullinit", frame("cmd=kvs-fence-response;rc=0;"))
		}, "expected fullinit-response"},
		{"garbage", func(s *fakeServer) {
			s.init(okInit)
			s.expect("fullinit", "12    not a message")
		}, "malformed"},
		{"bad rank", func(s *fakeServer) {
			s.init(okInit)
			s.expect("fullinit", frame("cmd=fullinit-response;rc=0;rank=5;size=4;"))
		}, "rank 5 of size 4"},
		{"no size", func(s *fakeServer) {
			s.init(okInit)
			s.expect("fullinit", frame("cmd=fullinit-response;rc=0;rank=0;"))
		}, "has no size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, s := newFake(t)
			go tc.serve(s)
			_, err := NewClient(context.Background(), conn, "7.0", 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewClient: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestClientFenceTimeout: a fence whose answer never comes ends with the
// context and leaves the client broken; a late answer is never taken for
// another request's.
func TestClientFenceTimeout(t *testing.T) {
	conn, s := newFake(t)
	go s.handshake("0", "2")
	c, err := NewClient(context.Background(), conn, "7.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	go s.expect("kvs-fence", "") // no answer
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = c.Fence(ctx)
	if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Fence: %v, want a deadline error", err)
	}
	if _, _, err := c.Get(context.Background(), "k"); !errors.Is(err, ErrBroken) {
		t.Errorf("Get after a timed-out fence: %v, want ErrBroken", err)
	}
	c.Close()
}

// TestClientServerGone: the server closing the connection mid-fence is an
// error at once, not a wait.
func TestClientServerGone(t *testing.T) {
	conn, s := newFake(t)
	go s.handshake("0", "2")
	c, err := NewClient(context.Background(), conn, "7.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		s.expect("kvs-fence", "")
		s.conn.Close()
	}()
	if err := c.Fence(context.Background()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Fence: %v, want unexpected EOF", err)
	}
	c.Close()
}

// TestClientAbort: abort sends isworld=TRUE and a message without ';'.
func TestClientAbort(t *testing.T) {
	conn, s := newFake(t)
	go s.handshake("0", "1")
	c, err := NewClient(context.Background(), conn, "7.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Message, 1)
	go func() {
		m, _ := s.expect("abort", "")
		got <- m
	}()
	if err := c.Abort("bad; very\nbad"); err != nil {
		t.Fatal(err)
	}
	m := <-got
	if w, _ := m.Get("isworld"); w != "TRUE" {
		t.Errorf("isworld %q", w)
	}
	if msg, _ := m.Get("msg"); msg != "bad, very bad" {
		t.Errorf("msg %q", msg)
	}
	if err := c.Abort("again"); !errors.Is(err, ErrClosed) {
		t.Errorf("second Abort: %v", err)
	}
	c.Close()
}

func TestOpenBadFD(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), fd, "1.0", 0); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Open of a file: %v", err)
	}
}

// TestClientAbortDuringFence: a task that aborts while another goroutine
// of it waits in a fence (for the task that is gone, say) sends the abort
// at once, not after the fence's timeout; the fence then ends with the
// connection, as Slurm kills the task.
func TestClientAbortDuringFence(t *testing.T) {
	conn, s := newFake(t)
	go s.handshake("0", "2")
	c, err := NewClient(context.Background(), conn, "7.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	fenced := make(chan struct{})
	got := make(chan Message, 1)
	go func() {
		s.expect("kvs-fence", "") // no answer: the other task is gone
		close(fenced)
		m, _ := s.expect("abort", "")
		got <- m
		s.conn.Close()
	}()
	fence := make(chan error, 1)
	go func() { fence <- c.Fence(context.Background()) }()
	<-fenced
	if err := c.Abort("rank 1 is gone"); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m.Cmd != "abort" {
		t.Fatalf("the server got %q", m.Cmd)
	}
	if err := <-fence; err == nil {
		t.Error("the fence succeeded after the server went")
	}
	if err := c.Abort("again"); !errors.Is(err, ErrClosed) {
		t.Errorf("second Abort: %v", err)
	}
	c.Close()
}
