// Package xdptest opens xam's data path on a test host for the tests of
// nicfw, its mapper and the layers above them: xam's XDP program attached
// to a device, and an AF_XDP socket on the device's queue 0 registered in
// the program, with the program's fault injection set. It is for tests
// only, which run as root in a network namespace of their own.
package xdptest
