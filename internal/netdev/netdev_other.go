//go:build !linux

package netdev

// System describes what the kernel and this process offer xam.
type System struct {
	Kernel   string          `json:"kernel"`
	Caps     map[string]bool `json:"capabilities,omitempty"`
	Problems []string        `json:"problems,omitempty"`
}

// Probe reports that xam needs Linux.
func Probe() *System {
	return &System{Problems: []string{"xam needs Linux (AF_XDP, XDP, network namespaces)"}}
}

// Describe fails: devices are read through Linux netlink.
func Describe(dev string) (*Device, error) { return nil, errNoFamily }
