package driver

import "github.com/xam-project/xam/afxdp"

// LinkOf returns the link under d, so that tests can inject raw frames
// (the test is then the link's only other user, in the same goroutine).
func LinkOf(d *Device) afxdp.Link { return d.link }
