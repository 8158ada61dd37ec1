//go:build !linux

package netdev

import "errors"

// System describes what the kernel and this process offer xam.
type System struct {
	Kernel   string          `json:"kernel"`
	Caps     map[string]bool `json:"capabilities,omitempty"`
	Problems []string        `json:"problems,omitempty"`
}

// Uname is the kernel's identity, as uname(2) gives it.
type Uname struct {
	Sysname string `json:"sysname"`
	Release string `json:"release"`
	Version string `json:"version"`
	Machine string `json:"machine"`
}

// Kernel fails: xam reads the kernel's identity on Linux only.
func Kernel() (Uname, error) { return Uname{}, errors.New("xam needs Linux") }

// Probe reports that xam needs Linux.
func Probe() *System {
	return &System{Problems: []string{"xam needs Linux (AF_XDP, XDP, network namespaces)"}}
}

// Describe fails: devices are read through Linux netlink.
func Describe(dev string) (*Device, error) { return nil, errNoFamily }
