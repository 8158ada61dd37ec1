// Package datapath opens xam's data path on a device: it loads xam's XDP
// program, attaches it (through a bpf_link, so that it goes when its owner
// does), opens an AF_XDP socket on a queue of the device and registers the
// socket with the program, which then steers xam's frames to it and passes
// everything else to the kernel.
//
// A Place is where that happens: a device (its index, its MAC and the
// host's IPv4 address, for the kernel peers of benchmarks) and how to run
// code in its network namespace. Here is a device of the caller's
// namespace; OnHost a host of a lab (package lab). Open makes the data
// path at a place, Endpoint.Close undoes it. The firmware daemon, the
// examples, the tests' hubs and the benchmarks all open devices this way.
package datapath
