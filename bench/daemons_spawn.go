package bench

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/syncbuf"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// The deployed shape (ShapeDaemons): each host's daemon is an `xam fw`
// process, as a lab runs it, and the measuring process holds only the
// applications. A daemon is this process's child, started from a thread
// kept for it alone with the parent-death signal set, so that it stops
// (SIGTERM: its socket and its XDP program go) when this process dies
// however it dies, and its stop function stops it otherwise.

// daemonStartBound bounds the wait for a spawned daemon's socket to
// answer: loading and attaching the program and opening the socket take
// a fraction of a second, far longer on a loaded machine.
const daemonStartBound = 2 * time.Minute

// spawnFirmwareHosts runs host i's daemon as `fw.Exe fw` on places a and b
// (their Dev and Netns), hosts amiiHostA and amiiHostB, each knowing the
// other, each with its socket in dir, args added to both command lines;
// it returns once both sockets answer. The returned function stops both;
// on an error nothing is left running.
func spawnFirmwareHosts(a, b datapath.Place, dir string, mode loader.Mode, queue int, fw FirmwareLayout, args []string) ([2]*firmwareHost, func(), error) {
	var hosts [2]*firmwareHost
	closeAll := func() {
		for _, h := range hosts {
			if h != nil && h.stop != nil {
				h.stop()
			}
		}
	}
	if fw.Exe == "" {
		return hosts, nil, errors.New("the daemons layout needs the xam program to run `xam fw` from")
	}
	places := [2]datapath.Place{a, b}
	ids := [2]nicfw.HostID{amiiHostA, amiiHostB}
	for i, p := range places {
		if p.Dev == "" {
			return hosts, nil, fmt.Errorf("host %c: the daemons layout needs the device's name", 'A'+i)
		}
		sock := filepath.Join(dir, fmt.Sprintf("h%d.sock", i))
		cmd := []string{"fw", "--dev", p.Dev, "--id", strconv.Itoa(int(ids[i])),
			"--host", fmt.Sprintf("%d=%s", ids[1-i], places[1-i].MAC), "--socket", sock,
			"--xdp-mode", mode.String(), "--queue", strconv.Itoa(queue)}
		if p.Netns != "" {
			cmd = append(cmd, "--netns", p.Netns)
		}
		switch {
		case fw.Sleep == daemon.BusyPoll:
			cmd = append(cmd, "--sleep", "0")
		case fw.Sleep > 0:
			cmd = append(cmd, "--sleep", fw.Sleep.String())
		}
		if cores := fw.Cores[i]; len(cores) > 0 {
			list := make([]string, len(cores))
			for j, c := range cores {
				list[j] = strconv.Itoa(c)
			}
			cmd = append(cmd, "--cores", strings.Join(list, ","))
		}
		h, err := spawnDaemon(fw.Exe, append(cmd, args...), sock)
		if err != nil {
			closeAll()
			return hosts, nil, fmt.Errorf("host %c's daemon: %w", 'A'+i, err)
		}
		hosts[i] = h
	}
	return hosts, closeAll, nil
}

// spawnDaemon starts `exe args...` and waits until its socket sock
// answers a stats request; an early exit is an error with the end of its
// output.
func spawnDaemon(exe string, args []string, sock string) (*firmwareHost, error) {
	out := &syncbuf.Buffer{}
	started, exited := make(chan error, 1), make(chan error, 1)
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// The parent-death signal follows the thread that started the child:
	// that thread stays, locked, until the child has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", exe, err)
	}
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		t := time.AfterFunc(daemonStartBound, func() { cmd.Process.Kill() })
		<-exited
		t.Stop()
	}
	h := &firmwareHost{sock: sock, stop: sync.OnceFunc(stop)}
	for start := time.Now(); ; {
		if c, err := daemon.Dial(sock); err == nil {
			_, err = c.Stats()
			c.Close()
			if err == nil {
				return h, nil
			}
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("exited (%v) before it answered on %s: %s", err, sock, lastLines(out.String(), 5))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(start) > daemonStartBound {
			stop()
			return nil, fmt.Errorf("no answer on %s within %v: %s", sock, daemonStartBound, lastLines(out.String(), 5))
		}
	}
}
