//go:build !linux

package slurmtest

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// Start stops the test: the Slurm daemons run on Linux.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	testenv.SkipOrFail(t, "slurmtest: the Slurm daemons need Linux")
	return nil
}
