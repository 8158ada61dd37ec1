package daemon

import "github.com/xam-project/xam/nicfw/endpoint"

func short(dest, handler uint32, args ...uint64) endpoint.Descriptor {
	d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: uint8(len(args)), Dest: dest, Handler: handler}
	copy(d.Args[:], args)
	return d
}
