package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records how a helper stopped the test. Skipf and Fatalf end the
// goroutine like the real ones, so run calls the helper on a goroutine of its
// own. Methods the helpers are not expected to call panic (nil embedded TB).
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a new fakeTB and returns it after fn returned or stopped.
func run(fn func(tb testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestCI(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "true": true, "TRUE": true, "1": true, "0": false, "false": false, "yes": false,
	} {
		t.Setenv("CI", v)
		if got := CI(); got != want {
			t.Errorf("CI=%q: CI() = %v, want %v", v, got, want)
		}
	}
}

// stops checks how f stopped: skipped outside CI, failed under it, with a
// message containing all of want.
func stops(t *testing.T, f *fakeTB, ci bool, want ...string) {
	t.Helper()
	switch {
	case ci && (!f.failed || f.skipped):
		t.Errorf("under CI: failed=%v skipped=%v, want a failure", f.failed, f.skipped)
	case !ci && (!f.skipped || f.failed):
		t.Errorf("outside CI: failed=%v skipped=%v, want a skip", f.failed, f.skipped)
	}
	for _, w := range want {
		if !strings.Contains(f.msg, w) {
			t.Errorf("message %q does not contain %q", f.msg, w)
		}
	}
}

func TestSkipOrFail(t *testing.T) {
	for _, ci := range []bool{false, true} {
		t.Run(fmt.Sprintf("CI=%v", ci), func(t *testing.T) {
			t.Setenv("CI", map[bool]string{false: "", true: "true"}[ci])
			f := run(func(tb testing.TB) { SkipOrFail(tb, "no %s here", "feature") })
			stops(t, f, ci, "no feature here")
			if ci && !strings.Contains(f.msg, "cannot skip in CI") {
				t.Errorf("message %q does not say a test cannot skip in CI", f.msg)
			}
		})
	}
}

func TestRequireCommand(t *testing.T) {
	for _, ci := range []bool{false, true} {
		t.Run(fmt.Sprintf("CI=%v", ci), func(t *testing.T) {
			t.Setenv("CI", map[bool]string{false: "", true: "1"}[ci])
			var path string
			f := run(func(tb testing.TB) { path = RequireCommand(tb, "sh") })
			if f.skipped || f.failed || !filepath.IsAbs(path) {
				t.Errorf("RequireCommand(sh) = %q, skipped=%v failed=%v (%s)", path, f.skipped, f.failed, f.msg)
			}
			f = run(func(tb testing.TB) { RequireCommand(tb, "xam-no-such-command") })
			stops(t, f, ci, "xam-no-such-command")
		})
	}
}

// helperEnv names the environment variable that enables the TestHelper tests,
// which the tests below run in a child process.
const helperEnv = "XAM_TESTENV_HELPER"

func TestHelperSkipOrFail(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return // a helper, run by TestRealTB in a child process
	}
	SkipOrFail(t, "helper stops here")
	t.Log("helper continued past SkipOrFail")
}

func TestHelperRequirePrivileged(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return // a helper, run by TestRequirePrivilegedAsNobody in a child process
	}
	RequirePrivileged(t)
	t.Log("helper continued past RequirePrivileged")
}

// child runs the test binary bin with only the test named test, under CI or
// not, and returns whether it succeeded and its output.
func child(t *testing.T, bin, test string, ci bool, prepare func(*exec.Cmd)) (bool, string) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, helperEnv+"=1")
	if ci {
		cmd.Env = append(cmd.Env, "CI=true")
	}
	if prepare != nil {
		prepare(cmd)
	}
	out, err := cmd.CombinedOutput()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("running %s: %v", test, err)
	}
	return err == nil, string(out)
}

// checkChild checks the outcome of a helper run: a skip outside CI, a failure
// with want in the output under CI, and never the line after the stop.
func checkChild(t *testing.T, test string, ci, ok bool, out string, want string) {
	t.Helper()
	if strings.Contains(out, "helper continued") {
		t.Errorf("%s continued after stopping:\n%s", test, out)
	}
	if ci {
		if ok || !strings.Contains(out, "--- FAIL: "+test) || !strings.Contains(out, want) {
			t.Errorf("under CI: %s succeeded=%v, want a failure saying %q:\n%s", test, ok, want, out)
		}
		return
	}
	if !ok || !strings.Contains(out, "--- SKIP: "+test) {
		t.Errorf("outside CI: %s succeeded=%v, want a skip:\n%s", test, ok, out)
	}
}

// TestRealTB checks SkipOrFail with a real *testing.T in a child process.
func TestRealTB(t *testing.T) {
	for _, ci := range []bool{false, true} {
		ok, out := child(t, os.Args[0], "TestHelperSkipOrFail", ci, nil)
		checkChild(t, "TestHelperSkipOrFail", ci, ok, out, "a test cannot skip in CI")
	}
}
