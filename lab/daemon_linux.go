package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A lab's daemons: processes that run on its hosts for as long as the lab
// stands, started by one command (`xam lab up --fw`) and stopped by
// another (`xam lab down`). Each is detached from the process that
// started it (a process group of its own, no terminal input, its output
// in a log file) and recorded in the lab's state dir, StateDir(NAME): HOST.json
// holds its pid and start time, beside its log HOST.log and, by
// convention, its socket HOST.sock. Whoever reads a record tells the
// daemon from a later process that reuses its pid by the start time.

// StateDir returns the directory of lab name's daemons: their records,
// logs and sockets. Down removes it.
func StateDir(name string) string { return filepath.Join(OwnerDir, name) }

func recordPath(name, host string) string { return filepath.Join(StateDir(name), host+".json") }

// StartDaemon starts spec's process for lab name and records it. The
// process runs in a process group of its own with standard input from
// /dev/null and standard output and error appended to its log, so that it
// outlives the caller and neither the terminal's Ctrl-C nor its hang-up
// reach it. It stays in the caller's session: where the kernel groups the
// scheduling of each session (autogroup), the daemons and the
// applications started from the same terminal share one group, and a
// daemon's engine that yields the processor while it polls
// (daemon.DefaultSleep) yields it to them rather than to nobody; while the caller lives on, it reaps the process when it
// exits. A host whose recorded daemon still runs is refused.
func StartDaemon(name string, spec DaemonSpec) (*Daemon, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if !validNode.MatchString(spec.Host) || spec.Host == "sw" || spec.Host == "rt" {
		return nil, fmt.Errorf("lab daemon: host %q: want h0, h1, ...", spec.Host)
	}
	if old, err := readDaemon(recordPath(name, spec.Host)); err == nil && old.Alive {
		return nil, fmt.Errorf("lab %s: host %s already runs a daemon (pid %d): `xam lab down --name %s` stops it",
			name, spec.Host, old.PID, name)
	}
	dir := StateDir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab state dir: %w", err)
	}
	logPath := filepath.Join(dir, spec.Host+".log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab daemon log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the daemon of %s: %w", spec.Host, err)
	}
	d := &Daemon{Host: spec.Host, Socket: spec.Socket, Log: logPath, PID: cmd.Process.Pid, Args: spec.Args}
	// Its start time is read before it is reaped: a daemon that exits at
	// once stays a zombie, whose /proc/PID/stat is still there, until then.
	st, err := procStat(d.PID)
	go cmd.Wait() // reaps it, should this process outlive it
	if err == nil {
		d.Start = st.start
		err = writeDaemon(recordPath(name, spec.Host), d)
	}
	if err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("recording the daemon of %s: %w", spec.Host, err)
	}
	d.Alive = true
	return d, nil
}

// writeDaemon writes d's record whole (a reader never sees half of it).
func writeDaemon(path string, d *Daemon) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readDaemon reads a record and whether its daemon runs.
func readDaemon(path string) (Daemon, error) {
	var d Daemon
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	d.Alive = d.Running()
	return d, nil
}

// Daemons returns lab name's daemons, by host, each with whether it runs.
func Daemons(name string) ([]Daemon, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(StateDir(name), "h*.json"))
	if err != nil {
		return nil, err
	}
	var ds []Daemon
	var errs []error
	for _, p := range paths {
		d, err := readDaemon(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b Daemon) int { return hostIndex(a.Host) - hostIndex(b.Host) })
	return ds, errors.Join(errs...)
}

func hostIndex(host string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(host, "h"))
	return i
}

// Running reports whether d's process runs: its pid is taken, by a process
// that started when d did and has not exited (a zombie has).
func (d *Daemon) Running() bool {
	st, err := procStat(d.PID)
	return err == nil && st.start == d.Start && st.state != 'Z' && st.state != 'X'
}

// WaitExit waits until d's process has exited, or timeout has passed,
// and reports whether it has exited.
func (d *Daemon) WaitExit(timeout time.Duration) bool {
	fd, err := d.pidfd()
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	return waitPidfd(fd, timeout)
}

// pidfd opens a descriptor of d's process, checked to be d's after it is
// open (so a signal sent through it never reaches a stranger).
func (d *Daemon) pidfd() (int, error) {
	if d.PID <= 0 {
		return -1, unix.ESRCH
	}
	fd, err := unix.PidfdOpen(d.PID, 0)
	if err != nil {
		return -1, err
	}
	if !d.Running() {
		unix.Close(fd)
		return -1, unix.ESRCH
	}
	return fd, nil
}

// waitPidfd waits for the process of fd to exit (the descriptor turns
// readable), at most timeout.
func waitPidfd(fd int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false
		case n > 0:
			return true
		case left == 0:
			return false
		}
	}
}

// StopDaemons stops lab name's daemons: SIGTERM to each, then, for each,
// a wait of up to grace for it to exit, and SIGKILL if it has not. It
// reports what it did, daemons that had exited before it came included,
// with the end of their logs, and removes the lab's state dir: records,
// logs and sockets.
func StopDaemons(name string, grace time.Duration) ([]Stopped, error) {
	ds, err := Daemons(name)
	errs := []error{err}
	stopped := make([]Stopped, len(ds))
	fds := make([]int, len(ds))
	for i, d := range ds {
		stopped[i].Daemon, fds[i] = d, -1
		fd, err := d.pidfd()
		if err != nil {
			stopped[i].Early, stopped[i].LogTail = true, LogTail(d.Log, 10)
			continue
		}
		fds[i] = fd
		if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("stopping the daemon of %s (pid %d): %w", d.Host, d.PID, err))
		}
	}
	for i, fd := range fds {
		if fd < 0 {
			continue
		}
		if !waitPidfd(fd, grace) {
			stopped[i].Killed = true
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			if !waitPidfd(fd, grace) {
				errs = append(errs, fmt.Errorf("the daemon of %s (pid %d) survives SIGKILL", stopped[i].Host, stopped[i].PID))
			}
		}
		unix.Close(fd)
	}
	if err := os.RemoveAll(StateDir(name)); err != nil {
		errs = append(errs, err)
	}
	return stopped, errors.Join(errs...)
}

// LogTail returns the last n lines of the log at path, or why there are
// none.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return "(the log is empty)"
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// stat is what procStat reads of a process.
type stat struct {
	state byte   // R, S, D, Z, ...
	start uint64 // clock ticks after boot
}

// procStat reads /proc/PID/stat: the state (field 3) and start time (field
// 22), counted after the command's closing parenthesis, which may itself
// hold spaces and parentheses.
func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return stat{state: f[0][0], start: start}, nil
}
