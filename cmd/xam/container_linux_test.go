package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// containerScript runs a command the way a container runtime would with
// the node's daemon socket bind-mounted (`docker run -v
// /run/xam/fw.sock:/run/xam/fw.sock`): in its own mount namespace, a fresh
// /run hides the host's, and the daemon's socket ($1) appears in it as
// /run/xam/fw.sock. $2 holds the socket while /run is replaced; the
// command is the rest.
const containerScript = `set -e
mount --bind "$1" "$2"
mount -t tmpfs container-run /run
mkdir -p /run/xam
touch /run/xam/fw.sock
mount --bind "$2" /run/xam/fw.sock
umount "$2"
shift 2
exec "$@"`

// container runs xam with args as a containerised application reaching the
// daemon at socket: in new user (root in it mapped to the caller's uid),
// mount, IPC, PID and network namespaces (unshare), with the socket
// bind-mounted at /run/xam/fw.sock, as the outer user cred (nil: this
// process's). It returns the exit status and output.
func container(t *testing.T, dir, bin, socket string, cred *syscall.Credential, args ...string) (int, string, string) {
	t.Helper()
	hold := filepath.Join(dir, fmt.Sprintf("hold%d", len(args)))
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unshare := []string{"--user", "--map-root-user", "--mount", "--ipc", "--pid", "--fork", "--net",
		"/bin/sh", "-c", containerScript, "sh", socket, hold, bin}
	cmd := exec.Command(testenv.RequireCommand(t, "unshare"), append(unshare, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// TestContainerClient: an application in a container reaches the node's
// daemon through the daemon's socket bind-mounted into it, and nothing
// else: it runs in user, mount, IPC, PID and network namespaces of its
// own (no network, no IPC namespace shared with the daemon), its endpoint
// memory arrives as a memfd over the socket. AM-II round trips complete
// through it to a server on the lab's other host. Root in the container is
// not root to the daemon: mapped to uid 65534 outside, the application is
// uid 65534 to the daemon (SO_PEERCRED), refused the weak tag only root
// may use, and served on a tag of its own.
func TestContainerClient(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireCommand(t, "unshare")
	testenv.RequireCommand(t, "mount")
	name := fmt.Sprintf("ctr%d", os.Getpid())
	code, up, errs, _ := labUpFw(t, name, "--fw-args", "--sleep 50us -v")
	if code != 0 {
		t.Fatalf("lab up --fw: exit %d: %s", code, errs)
	}
	lines := serveThrough(t, up.Daemons[1], "--tag", "new")
	m := regexp.MustCompile(`serving on tag (0x[0-9a-f]+)`).FindStringSubmatch(lines)
	if m == nil {
		t.Fatalf("the server printed no tag: %s", lines)
	}
	tag := m[1]

	// A copy of xam that uid 65534 may reach.
	bin := reachableCopy(t, "xam")
	dir := filepath.Dir(bin)
	ping := []string{"ping", "--api", "amii", "--socket", "/run/xam/fw.sock", "--peer-host", "1", "--count", "100", "--json"}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
		uid  string
	}{{"root", nil, "uid=0"}, {"nobody", nobody, "uid=65534"}} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := container(t, dir, bin, up.Daemons[0].Socket, tc.cred, append(ping, "--tag", tag)...)
			var r bench.AMIIResult
			if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 100 || r.Lost != 0 {
				t.Fatalf("ping from the container: exit %d: %s %s", code, out, errs)
			}
			log, err := os.ReadFile(up.Daemons[0].Log)
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`msg="endpoint opened".* ` + tc.uid + ` `).Match(log) {
				t.Errorf("the daemon's log shows no endpoint opened by %s:\n%s", tc.uid, log)
			}
		})
	}
	// The daemon's fixed tag is root's: uid 65534, root in its container,
	// is refused it.
	code, out, errs := container(t, dir, bin, up.Daemons[0].Socket, nobody, ping...)
	if code != 1 || !strings.Contains(errs, "permission") {
		t.Errorf("ping with root's tag from a container of uid 65534: exit %d: %s %s", code, out, errs)
	}
}

// TestDaemonCapabilities: the daemon runs with the capabilities
// docs/containers.md gives a containerised daemon, CAP_NET_ADMIN,
// CAP_NET_RAW, CAP_BPF and CAP_PERFMON, started in its device's network
// namespace (as in a container that has the device); without CAP_PERFMON
// it says so before it starts, rather than failing in the verifier.
func TestDaemonCapabilities(t *testing.T) {
	testenv.RequirePrivileged(t)
	setpriv := testenv.RequireCommand(t, "setpriv")
	nsenter := testenv.RequireCommand(t, "nsenter")
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("caps%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	socket := filepath.Join(t.TempDir(), "fw.sock")
	daemonWith := func(caps string) *exec.Cmd {
		cmd := exec.Command(nsenter, "--net="+filepath.Join(lab.NamespaceDir, l.Hosts[0].NS),
			setpriv, "--bounding-set", "-all,"+caps, "--inh-caps", "-all", "--",
			os.Args[0], "fw", "--dev", "eth0", "--id", "0", "--host", "1="+l.Hosts[1].MAC.String(), "--socket", socket, "--sleep", "1ms")
		cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
		return cmd
	}
	out, err := daemonWith("+net_admin,+net_raw,+bpf").CombinedOutput()
	if !strings.Contains(string(out), "needs root (missing CAP_PERFMON)") {
		t.Errorf("xam fw without CAP_PERFMON: %v: %s", err, out)
	}
	cmd := daemonWith("+net_admin,+net_raw,+bpf,+perfmon")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	waitFor(t, "the daemon's socket", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("xam fw with CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_PERFMON: %v: %s", err, log.String())
		default:
		}
		return answers(socket)
	})
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("xam fw after SIGTERM: %v: %s", err, log.String())
	}
	exited <- nil
}
