package main

import (
	"fmt"
	"strings"

	"github.com/xam-project/xam/internal/netdev"
)

// errNeedRoot is the one-line error of a command run without the
// privileges it needs: which capabilities are missing, and what to do.
type errNeedRoot struct {
	what    string
	missing []string
}

func (e errNeedRoot) Error() string {
	return fmt.Sprintf("%s needs root (missing %s): run it with sudo, or see `xam doctor`", e.what, strings.Join(e.missing, ", "))
}

// needPrivileges returns errNeedRoot when this process lacks what a
// command that builds labs, attaches XDP programs and opens AF_XDP sockets
// needs: CAP_NET_ADMIN, CAP_NET_RAW, and CAP_BPF with CAP_PERFMON (or
// CAP_SYS_ADMIN).
func needPrivileges(what string) error {
	s := netdev.Probe()
	if s.Caps == nil {
		return nil // not Linux: the command fails on its own, saying so
	}
	var missing []string
	for _, c := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW"} {
		if !s.Caps[c] {
			missing = append(missing, c)
		}
	}
	missing = append(missing, netdev.MissingBPF(s.Caps)...)
	if len(missing) == 0 {
		return nil
	}
	return errNeedRoot{what: what, missing: missing}
}
