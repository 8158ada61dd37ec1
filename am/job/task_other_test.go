//go:build !linux

package job

import (
	"fmt"
	"os"
)

// task: the tests' jobs run on Linux only.
func task(mode string) int {
	fmt.Fprintf(os.Stderr, "task %s: Linux only\n", mode)
	return 1
}
