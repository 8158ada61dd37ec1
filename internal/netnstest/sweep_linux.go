package netnstest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/lab"
)

// Sweep removes the namespaces that test processes which no longer run left
// behind: those named Prefix+PID+"-"... whose PID is not a live process. It
// returns the errors of the removals that failed; removals that other
// processes sweeping at the same time win are not errors.
func Sweep() error {
	entries, err := os.ReadDir(lab.NamespaceDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netnstest: sweep: %w", err)
	}
	var errs []error
	for _, e := range entries {
		pid, ok := ownerPid(e.Name())
		if !ok || alive(pid) {
			continue
		}
		if err := lab.DeleteNamespace(e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("netnstest: sweep: %w", err))
		}
	}
	return errors.Join(errs...)
}

// ownerPid returns the pid embedded in a namespace name of this package.
func ownerPid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

// alive reports whether pid is a running process (or one not ours to signal).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
