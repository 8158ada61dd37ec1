package job

import (
	"os"
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// The environment of the tests' tasks: the tests start this binary under
// srun with taskEnv naming what each task does (see task), instead of
// running the tests.
const (
	taskEnv   = "XAM_JOB_TEST_TASK"   // the task's mode: amii, grim, ssam, kill, fence, twojobs
	outEnv    = "XAM_JOB_TEST_OUT"    // the folder each task writes its report to
	modeEnv   = "XAM_JOB_TEST_MODE"   // inline or firmware
	socketEnv = "XAM_JOB_TEST_SOCKET" // the node daemon's socket, %d the host id
	lossEnv   = "XAM_JOB_TEST_LOSS"   // the drop rate of the node's XDP program (inline)
	countEnv  = "XAM_JOB_TEST_N"      // requests from each rank to each other
	fenceEnv  = "XAM_JOB_TEST_FENCE"  // the job's fence timeout
	labelEnv  = "XAM_JOB_TEST_LABEL"  // twojobs: this job's label, A or B
)

// TestMain runs the binary as a task of a job when taskEnv says so;
// otherwise the tests, failing the run if they leave sockets, BPF objects
// or mappings behind.
func TestMain(m *testing.M) {
	if mode := os.Getenv(taskEnv); mode != "" {
		os.Exit(task(mode))
	}
	testenv.MainWithLeakCheck(m)
}
