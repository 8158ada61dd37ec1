package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// OwnerDir holds a lock file per lab that a process owns. A variable so
// that tests can point it elsewhere.
var OwnerDir = "/run/xam/labs"

func ownerPath(name string) string { return filepath.Join(OwnerDir, name+".owner") }

// own takes the owner lock of lab name for the life of this process (or
// until release): an exclusive flock on its owner file, which the kernel
// lets go when the process dies however it dies.
func own(name string) (*os.File, error) {
	if err := os.MkdirAll(OwnerDir, 0o755); err != nil {
		return nil, fmt.Errorf("lab owner file: %w", err)
	}
	f, err := os.OpenFile(ownerPath(name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab owner file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lab %s: owner lock: %w", name, err)
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// state tells who holds lab name.
func state(name string) Info {
	info := Info{Name: name, State: Persistent}
	f, err := os.Open(ownerPath(name))
	if err != nil {
		return info
	}
	defer f.Close()
	var b [32]byte
	n, _ := f.Read(b[:])
	info.Owner, _ = strconv.Atoi(string(trimSpace(b[:n])))
	// The lock is the owner's for as long as it lives: taking it means the
	// owner is gone. Taken, it is let go at once (Close).
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		info.State = Owned
	} else {
		info.State = Stale
	}
	return info
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// Labs returns every lab that exists, with who holds it and its daemons.
func Labs() ([]Info, error) {
	names, err := List()
	if err != nil {
		return nil, err
	}
	infos := make([]Info, 0, len(names))
	var errs []error
	for _, n := range names {
		info := state(n)
		info.Daemons, err = Daemons(n)
		infos, errs = append(infos, info), append(errs, err)
	}
	return infos, errors.Join(errs...)
}

// DownStale removes the labs whose owner process is gone and returns their
// names; labs that live processes own, and persistent ones, stay.
func DownStale() ([]string, error) {
	infos, err := Labs()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, info := range infos {
		if info.State == Stale {
			removed = append(removed, info.Name)
			errs = append(errs, Down(info.Name))
		}
	}
	return removed, errors.Join(errs...)
}
