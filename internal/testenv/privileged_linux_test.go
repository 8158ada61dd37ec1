package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRequirePrivileged(t *testing.T) {
	const (
		all      = 1<<unix.CAP_BPF | 1<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_NET_ADMIN
		noBPF    = all &^ (1 << unix.CAP_BPF) // as on kernels before 5.8: SYS_ADMIN stands in
		noNetAdm = all &^ (1 << unix.CAP_NET_ADMIN)
	)
	cases := []struct {
		name      string
		euid      int
		effective uint64
		err       error
		ok        bool
		want      []string
	}{
		{name: "root", euid: 0, effective: 1<<(unix.CAP_LAST_CAP+1) - 1, ok: true},
		{name: "capabilities only", euid: 1000, effective: all, ok: true},
		{name: "SYS_ADMIN for BPF", euid: 1000, effective: noBPF, ok: true},
		{name: "root without NET_ADMIN", euid: 0, effective: noNetAdm, want: []string{"euid 0", "CAP_NET_ADMIN"}},
		{name: "nobody", euid: 65534, want: []string{"euid 65534", "CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_NET_RAW, CAP_BPF"}},
		{name: "capget fails", err: fmt.Errorf("capget: boom"), want: []string{"capget: boom"}},
	}
	saved := probe
	t.Cleanup(func() { probe = saved })
	for _, c := range cases {
		for _, ci := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/CI=%v", c.name, ci), func(t *testing.T) {
				t.Setenv("CI", map[bool]string{false: "", true: "true"}[ci])
				probe = func() (int, uint64, error) { return c.euid, c.effective, c.err }
				f := run(RequirePrivileged)
				if c.ok {
					if f.skipped || f.failed {
						t.Fatalf("skipped=%v failed=%v (%s), want neither", f.skipped, f.failed, f.msg)
					}
					return
				}
				stops(t, f, ci, c.want...)
				if ci && !strings.Contains(f.msg, "privileged test cannot skip in CI") {
					t.Errorf("message %q does not say a privileged test cannot skip in CI", f.msg)
				}
			})
		}
	}
}

// TestRequirePrivilegedAsNobody runs RequirePrivileged in a child process that
// root starts as uid 65534, which leaves it no capabilities.
func TestRequirePrivilegedAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root to start a child as uid 65534")
	}
	// The test binary sits in go's private build directory; copy it where
	// uid 65534 may run it.
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "testenv.test")
	copyFile(t, os.Args[0], bin)
	for _, ci := range []bool{false, true} {
		ok, out := child(t, bin, "TestHelperRequirePrivileged", ci, func(cmd *exec.Cmd) {
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
			}
		})
		checkChild(t, "TestHelperRequirePrivileged", ci, ok, out, "a privileged test cannot skip in CI")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
