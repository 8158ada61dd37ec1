//go:build !linux

package lab

import (
	"errors"
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
