//go:build !linux

package ssam

import (
	"errors"
	"testing"

	"github.com/xam-project/xam/internal/netnstest"
)

// rawInjector needs Linux's packet sockets.
func rawInjector(t *testing.T, v *netnstest.Pair) func(toB bool, frames [][]byte) error {
	return func(bool, [][]byte) error { return errors.New("ssam: raw frames need Linux") }
}
