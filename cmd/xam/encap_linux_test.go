package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// TestPingEncap: xam ping --encap udp|udp6 runs raw frames, AM-II and
// GRIM in xam's UDP form between two hosts on two subnets joined by a
// router namespace; AM-II and GRIM deliver every message exactly once
// while both hosts' XDP programs drop 5% of the frames.
func TestPingEncap(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, c := range []struct {
		args  []string
		encap string
		sent  int
	}{
		{[]string{"--api", "raw", "--encap", "udp", "--count", "300"}, "udp:18553", 0},
		{[]string{"--api", "raw", "--encap", "udp6:4000", "--count", "100", "--mtu", "9000", "--size", "8000"}, "udp6:4000", 0},
		{[]string{"--api", "amii", "--encap", "udp", "--count", "300", "--loss", "0.05"}, "udp:18553", 330},
		{[]string{"--api", "amii", "--encap", "udp6", "--count", "100", "--size", "3000", "--loss", "0.05"}, "udp6:18553", 110},
		{[]string{"--api", "grim", "--encap", "udp", "--count", "300", "--loss", "0.05"}, "udp:18553", 330},
		{[]string{"--api", "grim", "--encap", "udp6", "--count", "100", "--size", "3000", "--loss", "0.05"}, "udp6:18553", 110},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := xam(t, nil, append([]string{"ping", "--json"}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var r struct {
				Lost       int `json:"lost"`
				Sent       int `json:"sent"`
				Delivered  int `json:"delivered"`
				Duplicates int `json:"duplicates"`
				Config     struct {
					Encap  string `json:"encap"`
					Routed bool   `json:"routed"`
				} `json:"config"`
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if r.Lost != 0 || r.Config.Encap != c.encap || !r.Config.Routed {
				t.Errorf("%+v: %s", r, out)
			}
			if c.sent != 0 && (r.Sent != c.sent || r.Delivered != r.Sent || r.Duplicates != 0) {
				t.Errorf("not exactly once: %+v", r)
			}
		})
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--api", "ssam", "--encap", "udp"}, "works with --api raw, amii or grim"},
		{[]string{"--encap", "udp:0"}, "the port is a number in 1..65535"},
		{[]string{"--encap", "vxlan"}, "want raw, udp[:PORT] or udp6[:PORT]"},
		{[]string{"--api", "amii", "--mode", "firmware", "--encap", "udp"}, "--mode inline"},
		{[]string{"--api", "amii", "--dup", "0.1", "--encap", "udp"}, "lab is routed"},
		{[]string{"--encap", "udp", "--timestamps"}, "--encap raw"},
		{[]string{"--encap", "udp", "--dev", "lo", "--peer", "02:00:00:00:00:01"}, "the peer's IP address"},
	} {
		if code, _, errs := xam(t, nil, append([]string{"ping"}, c.args...)...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("ping %v: exit %d, %s; want %q", c.args, code, errs, c.want)
		}
	}
}
