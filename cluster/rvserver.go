package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"
)

// rvServer is rank 0's rendezvous server (see rendezvous.go).
type rvServer struct {
	ln     net.Listener
	digest string
	size   int

	mu      sync.Mutex // guards the fields below, and every write to a connection
	conns   map[int]net.Conn
	fenced  map[int]bool      // ranks in the current fence
	round   map[string]string // their puts
	left    map[int]bool      // ranks that said bye or were lost
	lost    map[int]bool      // ranks that were lost
	aborted *rvMsg
	done    chan struct{} // closed when every rank has left
}

// listenRendezvous starts rank 0's server on port, on every address.
func listenRendezvous(port, digest string, size int) (*rvServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", port))
	if err != nil {
		return nil, fmt.Errorf("cluster: rank 0 cannot listen on the rendezvous port: %w", err)
	}
	s := &rvServer{ln: ln, digest: digest, size: size, conns: map[int]net.Conn{},
		fenced: map[int]bool{}, round: map[string]string{}, left: map[int]bool{}, lost: map[int]bool{}, done: make(chan struct{})}
	go s.accept()
	return s, nil
}

// accept serves connections until the listener closes.
func (s *rvServer) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(conn)
	}
}

// serve reads one rank's messages.
func (s *rvServer) serve(conn net.Conn) {
	r := bufio.NewReader(conn)
	dec := json.NewDecoder(r)
	conn.SetReadDeadline(time.Now().Add(rvIOTimeout))
	var hello rvMsg
	if err := dec.Decode(&hello); err != nil || hello.Op != "hello" {
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	rank := hello.Rank
	if msg := s.admit(conn, hello); msg != "" {
		s.write(conn, rvMsg{Op: "error", Msg: msg})
		conn.Close()
		return
	}
	for {
		var m rvMsg
		if err := dec.Decode(&m); err != nil {
			s.leave(rank, false)
			return
		}
		switch m.Op {
		case "fence":
			s.fence(rank, m.KV)
		case "abort":
			s.abort(rank, m.Msg)
		case "bye":
			s.leave(rank, true)
			return
		}
	}
}

// admit registers a rank's connection, or says why not.
func (s *rvServer) admit(conn net.Conn, m rvMsg) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case m.Digest != s.digest:
		return fmt.Sprintf("rank %d's hostfile differs from rank 0's (digest %s, rank 0 has %s)", m.Rank, m.Digest, s.digest)
	case m.Size != s.size || m.Rank < 0 || m.Rank >= s.size:
		return fmt.Sprintf("rank %d of %d does not fit rank 0's job of %d ranks", m.Rank, m.Size, s.size)
	case s.conns[m.Rank] != nil || s.left[m.Rank]:
		return fmt.Sprintf("rank %d joined twice", m.Rank)
	}
	s.conns[m.Rank] = conn
	s.writeLocked(conn, rvMsg{Op: "welcome"})
	if s.aborted != nil {
		s.writeLocked(conn, *s.aborted)
	}
	for r := range s.lost {
		s.writeLocked(conn, rvMsg{Op: "lost", Rank: r})
	}
	return ""
}

// fence records a rank's fence, and ends the fence when all ranks are in.
func (s *rvServer) fence(rank int, kv map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenced[rank] = true
	for k, v := range kv {
		s.round[k] = v
	}
	if len(s.fenced) < s.size {
		return
	}
	for _, c := range s.conns {
		s.writeLocked(c, rvMsg{Op: "fenced", KV: s.round})
	}
	s.fenced, s.round = map[int]bool{}, map[string]string{}
}

// abort tells every other rank.
func (s *rvServer) abort(rank int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := rvMsg{Op: "abort", Rank: rank, Msg: msg}
	s.aborted = &m
	for r, c := range s.conns {
		if r != rank {
			s.writeLocked(c, m)
		}
	}
}

// leave records that rank left: with bye, answered; without, announced to
// the others as lost.
func (s *rvServer) leave(rank int, bye bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[rank]
	delete(s.conns, rank)
	s.left[rank] = true
	if bye {
		s.writeLocked(c, rvMsg{Op: "bye"})
	} else if s.aborted == nil {
		s.lost[rank] = true
		for _, o := range s.conns {
			s.writeLocked(o, rvMsg{Op: "lost", Rank: rank})
		}
	}
	c.Close()
	if len(s.left) == s.size {
		s.ln.Close()
		close(s.done)
	}
}

func (s *rvServer) write(c net.Conn, m rvMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(c, m)
}

// writeLocked writes m to c; a rank too slow to read for rvIOTimeout has
// its connection closed, and is lost.
func (s *rvServer) writeLocked(c net.Conn, m rvMsg) {
	c.SetWriteDeadline(time.Now().Add(rvIOTimeout))
	if err := json.NewEncoder(c).Encode(m); err != nil {
		c.Close()
	}
}

// wait waits until every rank has left, or ctx ends; then it stops the
// server.
func (s *rvServer) wait(ctx context.Context) error {
	var err error
	select {
	case <-s.done:
	case <-ctx.Done():
		err = fmt.Errorf("cluster: rank 0 closed the rendezvous before every rank had closed: %w", ctx.Err())
	}
	s.shutdown()
	return err
}

// shutdown closes the listener and every connection.
func (s *rvServer) shutdown() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}
