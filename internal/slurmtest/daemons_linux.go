package slurmtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pollEvery is how often Start asks whether a daemon is ready: Slurm offers
// no event to wait on. Each question is answered in milliseconds.
const pollEvery = 50 * time.Millisecond

// stopWait is how long a daemon has to end after SIGTERM before SIGKILL.
const stopWait = 10 * time.Second

// daemon is one process Start started.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  string        // file of its standard output and error
	done chan struct{} // closed when it has exited
	err  error         // its exit, once done is closed
}

// daemons are the processes of one cluster.
type daemons struct {
	c     *Cluster
	munge *daemon
	slurm []*daemon // slurmctld first, then a slurmd per node
}

// start starts name with args as a child of the test, its output in
// log/NAME.out, in a process group of its own.
func (d *daemons) start(name string, cred *syscall.Credential, args ...string) (*daemon, error) {
	out := filepath.Join(d.c.Dir, "log", name+".out")
	f, err := os.Create(out)
	if err != nil {
		return nil, fmt.Errorf("slurmtest: %w", err)
	}
	defer f.Close()
	if cred != nil {
		os.Chown(out, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = d.c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.Env = d.c.Env()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("slurmtest: starting %s: %w", name, err)
	}
	p := &daemon{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// startMunge starts the cluster's munged as user munge and waits until its
// socket accepts connections.
func (d *daemons) startMunge(ctx context.Context, munge *user.User) error {
	uid, _ := strconv.Atoi(munge.Uid)
	gid, _ := strconv.Atoi(munge.Gid)
	m := filepath.Join(d.c.Dir, "munge")
	sock := filepath.Join(m, "munge.socket")
	p, err := d.start("munged", &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
		"munged", "--foreground", "--socket="+sock, "--key-file="+filepath.Join(m, "munge.key"),
		"--pid-file="+filepath.Join(m, "munged.pid"), "--seed-file="+filepath.Join(m, "munged.seed"),
		"--log-file="+filepath.Join(m, "munged.log"))
	if err != nil {
		return err
	}
	d.munge = p
	return waitFor(ctx, p, "munged's socket", func() (bool, error) {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// startSlurm starts slurmctld, waits until it accepts connections, starts
// the slurmds and waits until sinfo shows every node idle.
func (d *daemons) startSlurm(ctx context.Context) error {
	ctld, err := d.start("slurmctld", nil, "slurmctld", "-D", "-f", d.c.Conf)
	if err != nil {
		return err
	}
	d.slurm = append(d.slurm, ctld)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.c.CtldPort))
	err = waitFor(ctx, ctld, "slurmctld's port", func() (bool, error) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, n := range d.c.Nodes {
		p, err := d.start("slurmd-"+n, nil, "slurmd", "-D", "-N", n, "-f", d.c.Conf)
		if err != nil {
			return err
		}
		d.slurm = append(d.slurm, p)
	}
	return waitFor(ctx, nil, "every node idle in sinfo", d.idle)
}

// idle reports whether sinfo shows every node of the cluster idle.
func (d *daemons) idle() (bool, error) {
	for _, p := range d.slurm {
		select {
		case <-p.done:
			return false, p.exited()
		default:
		}
	}
	out, err := d.c.Command("sinfo", "-h", "-N", "-o", "%N %T").Output()
	if err != nil {
		return false, nil // slurmctld not answering yet
	}
	idle := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if name, state, ok := strings.Cut(line, " "); ok && state == "idle" {
			idle[name] = true
		}
	}
	for _, n := range d.c.Nodes {
		if !idle[n] {
			return false, nil
		}
	}
	return true, nil
}

// exited describes a daemon that stopped during Start, from the end of its
// output; errPortTaken when it could not bind its port.
func (p *daemon) exited() error {
	out, _ := os.ReadFile(p.out)
	msg := fmt.Errorf("slurmtest: %s exited during start (%v): %s", p.name, p.err, tail(out, 10))
	if bytes.Contains(out, []byte("Address already in use")) {
		return fmt.Errorf("%w: %w", errPortTaken, msg)
	}
	return msg
}

// waitFor asks ready every pollEvery until it says yes, fails, p exits, or
// ctx ends.
func waitFor(ctx context.Context, p *daemon, what string, ready func() (bool, error)) error {
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		select {
		case <-exited:
			return p.exited()
		case <-ctx.Done():
			return fmt.Errorf("slurmtest: waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop runs at the test's end: it logs the daemons' logs when the test
// failed, cancels the jobs, stops the daemons and kills what they started.
func (d *daemons) stop(t testing.TB) {
	if t.Failed() {
		d.logTails(t)
	}
	if len(d.slurm) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), stopWait)
		cmd := exec.CommandContext(ctx, "scancel", "--full", "--user="+strconv.Itoa(os.Getuid()))
		cmd.Env, cmd.Dir = d.c.Env(), d.c.workDir()
		cmd.Run()
		cancel()
	}
	d.stopSlurm()
	killMarked(d.c.Dir)
	if d.munge != nil {
		d.munge.terminate()
		d.munge = nil
	}
}

// stopSlurm stops the slurmds, then slurmctld.
func (d *daemons) stopSlurm() {
	for i := len(d.slurm) - 1; i >= 0; i-- {
		d.slurm[i].terminate()
	}
	d.slurm = nil
}

// terminate sends SIGTERM to the daemon's process group, and SIGKILL when
// it has not exited after stopWait; it returns once the daemon has exited.
func (p *daemon) terminate() {
	pid := p.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopWait):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
}

// killMarked kills every process whose environment carries the cluster's
// marker (slurmstepd, tasks, srun), and waits until they are gone.
func killMarked(dir string) {
	marker := []byte(EnvMarker + "=" + dir + "\x00")
	deadline := time.Now().Add(stopWait)
	for {
		pids := marked(marker)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(pollEvery)
	}
}

// marked returns the processes (not zombies) whose environment holds marker.
func marked(marker []byte) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, marker...)) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if _, after, ok := bytes.Cut(stat, []byte(") ")); ok && len(after) > 0 && after[0] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// logTails logs the end of every log and output file of the cluster.
func (d *daemons) logTails(t testing.TB) {
	files, _ := filepath.Glob(filepath.Join(d.c.Dir, "log", "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		t.Logf("slurmtest: end of %s:\n%s", filepath.Base(f), tail(b, 30))
	}
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
