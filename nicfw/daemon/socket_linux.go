//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/nicfw"
)

// The daemon's unix socket: claiming its path, accepting connections, and
// refusing those past a bound in the accepting goroutine itself. What an
// accepted connection does is in daemonconn_linux.go.

// claimSocket makes path free for a new daemon's socket: nothing there, or
// a socket left by a daemon that died (nobody accepts on it), which it
// removes. A socket on which a daemon answers, or anything that is not a
// socket, is ErrSocketInUse: a second daemon never takes over the path of
// a live one (which would leave it unreachable), nor removes a file that
// is not its to remove.
func claimSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nicfw: daemon socket: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%w: %s exists and is not a socket", ErrSocketInUse, path)
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: a daemon is serving on %s (stop it, or give another --socket)", ErrSocketInUse, path)
	}
	if !errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("%w: %s: %w", ErrSocketInUse, path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("nicfw: removing the stale daemon socket: %w", err)
	}
	return nil
}

// accept serves the socket.
func (d *Daemon) accept() {
	pause := time.Millisecond
	for {
		conn, err := d.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return // closed by shutdown
		}
		if err != nil {
			// Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS):
			// connections that close free them, so accept again soon,
			// never give up.
			d.log.Warn("accept", "err", err)
			time.Sleep(pause)
			pause = min(2*pause, 100*time.Millisecond)
			continue
		}
		pause = time.Millisecond
		c, err := d.newConn(conn)
		if err != nil {
			d.refuseConn(conn, err)
			continue
		}
		d.wg.Go(c.serve)
	}
}

// refuseConn answers a refused connection with why, and closes it, here in
// the accepting goroutine: no goroutine, no buffer and no wait per refused
// connection, so that a flood of them costs the daemon nothing that stays.
// The reason is written before anything was asked (a new socket's buffer
// is empty: the write does not block) and the client's first request, if
// it is there, is read (truncated to a byte) so that the close does not
// reset the connection. A client that sends later finds the reason
// waiting (Conn's calls read it after the write or read fails).
func (d *Daemon) refuseConn(conn *net.UnixConn, err error) {
	d.mu.Lock()
	d.refused++
	now := time.Now()
	logIt, quiet := now.Sub(d.refusedLogged) >= time.Second, d.refusedQuiet
	if logIt {
		d.refusedLogged, d.refusedQuiet = now, 0
	} else {
		d.refusedQuiet++
	}
	d.mu.Unlock()
	if logIt {
		d.log.Warn("connection refused", "err", err, "refused and not logged since", quiet)
	}
	b, _ := json.Marshal(Reply{Error: err.Error(), Code: codeOf(err), Host: nicfw.HostID(d.host.Load())})
	if raw, rerr := conn.SyscallConn(); rerr == nil {
		raw.Control(func(fd uintptr) {
			unix.Sendmsg(int(fd), b, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			var one [1]byte
			unix.Recvfrom(int(fd), one[:], unix.MSG_DONTWAIT)
		})
	}
	conn.Close()
}
