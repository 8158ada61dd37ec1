//go:build pins

// Package pins holds blank imports of the dependencies that go.mod pins
// before a package of xam imports them, so that `go mod tidy` keeps them.
// The build tag keeps this file out of every real build.
package pins

import (
	_ "github.com/cilium/ebpf"
	_ "github.com/google/gopacket/layers"
	_ "github.com/google/gopacket/pcapgo"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/sys/unix"
)
