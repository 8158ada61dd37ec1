package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run under continuous integration: the
// environment variable CI is "true" (in any case) or "1".
func CI() bool {
	v := os.Getenv("CI")
	return v == "1" || strings.EqualFold(v, "true")
}

// SkipOrFail stops the test because the environment lacks something it needs:
// it skips with the formatted reason, or, under CI, fails with it.
func SkipOrFail(tb testing.TB, format string, args ...any) {
	tb.Helper()
	skipOrFail(tb, "a test cannot skip in CI", fmt.Sprintf(format, args...))
}

// skipOrFail skips with msg, or under CI fails with msg and the note ciNote
// saying why a skip is not allowed.
func skipOrFail(tb testing.TB, ciNote, msg string) {
	tb.Helper()
	if CI() {
		tb.Fatalf("%s (CI is set: %s)", msg, ciNote)
		return
	}
	tb.Skipf("%s", msg)
}

// RequireCommand returns the path of the executable name (looked up like
// exec.LookPath), or stops the test with SkipOrFail when there is none.
func RequireCommand(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(tb, "command %q not available: %v", name, err)
		return ""
	}
	return path
}

// FramesPerOp takes the frames two hosts, A and B, have sent so far, by
// frames, and returns a function that reports, once b's loop is over, the
// frames each sent per operation since ("Aframes/op", "Bframes/op"): a
// benchmark defers it.
func FramesPerOp(b *testing.B, frames func() (a, b uint64)) func() {
	a0, b0 := frames()
	return func() {
		a1, b1 := frames()
		b.ReportMetric(float64(a1-a0)/float64(b.N), "Aframes/op")
		b.ReportMetric(float64(b1-b0)/float64(b.N), "Bframes/op")
	}
}
