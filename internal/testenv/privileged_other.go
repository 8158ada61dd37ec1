//go:build !linux

package testenv

import "testing"

// RequirePrivileged stops the test: privileged tests need Linux. It skips, or
// under CI fails, since a privileged test cannot skip in CI.
func RequirePrivileged(tb testing.TB) {
	tb.Helper()
	skipOrFail(tb, "a privileged test cannot skip in CI", "privileged test: needs Linux")
}
