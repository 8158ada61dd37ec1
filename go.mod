module github.com/xam-project/xam

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2
	github.com/asavie/xdp v0.3.3
	github.com/cilium/ebpf v0.22.0
	github.com/google/gopacket v1.1.19
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/sys v0.49.0
)

require golang.org/x/net v0.48.0 // indirect

tool github.com/cilium/ebpf/cmd/bpf2go
