//go:build !linux

package lab

import (
	"errors"
	"time"
)

var errNotLinux = errors.New("lab: network namespaces need Linux")

// Prefix starts the name of every namespace of every lab.
const Prefix = "xam-"

// Config describes a lab to build.
type Config struct {
	Name       string
	Hosts      int
	Switch     bool
	PortRate   uint64
	PortBuffer uint32
	MTU        int
	Queues     int
	IPv6       bool
	Routed     bool
	Persistent bool
}

// Lab is a built lab.
type Lab struct{ Name string }

// Up fails: labs need Linux.
func Up(Config) (*Lab, error) { return nil, errNotLinux }

// Close does nothing.
func (l *Lab) Close() error { return nil }

// Down fails: labs need Linux.
func (l *Lab) Down() error { return errNotLinux }

// Down fails: labs need Linux.
func Down(string) error { return errNotLinux }

// DownAll fails: labs need Linux.
func DownAll() ([]string, error) { return nil, errNotLinux }

// List fails: labs need Linux.
func List() ([]string, error) { return nil, errNotLinux }

// Labs fails: labs need Linux.
func Labs() ([]Info, error) { return nil, errNotLinux }

// DownStale fails: labs need Linux.
func DownStale() ([]string, error) { return nil, errNotLinux }

// StateDir returns the directory of lab name's daemons.
func StateDir(name string) string { return "/run/xam/labs/" + name }

// StartDaemon fails: labs need Linux.
func StartDaemon(string, DaemonSpec) (*Daemon, error) { return nil, errNotLinux }

// Daemons fails: labs need Linux.
func Daemons(string) ([]Daemon, error) { return nil, errNotLinux }

// StopDaemons fails: labs need Linux.
func StopDaemons(string, time.Duration) ([]Stopped, error) { return nil, errNotLinux }

// Running reports false: labs need Linux.
func (d *Daemon) Running() bool { return false }

// WaitExit reports true: labs need Linux.
func (d *Daemon) WaitExit(time.Duration) bool { return true }

// LogTail returns nothing: labs need Linux.
func LogTail(string, int) string { return "" }
