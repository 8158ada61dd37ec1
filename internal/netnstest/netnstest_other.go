//go:build !linux

package netnstest

import (
	"errors"
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

var errNotLinux = errors.New("netnstest: network namespaces need Linux")

// NewVethPair stops the test: network namespaces need Linux.
func NewVethPair(tb testing.TB, opts ...Option) *Pair {
	tb.Helper()
	testenv.RequirePrivileged(tb)
	testenv.SkipOrFail(tb, "netnstest: network namespaces need Linux")
	return nil
}

// Do returns an error: network namespaces need Linux.
func (h *Host) Do(fn func() error) error { return errNotLinux }

// Sweep does nothing: there are no namespaces to remove.
func Sweep() error { return nil }
