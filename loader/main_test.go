package loader

import (
	"os"
	"testing"
)

// childEnv, when set, makes the test binary run as the child of
// TestAttachmentDiesWithOwner instead of running tests (attach_linux_test.go).
const childEnv = "XAM_LOADER_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	os.Exit(m.Run())
}
