package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/xam-project/xam/bench"
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

// TestLabUpFwRouted: `xam lab up --routed --fw` starts daemons that speak
// xam's UDP form across the router, peers given by IP; AM-II pings go
// through them, and `xam fw stats` shows the form, its counters and each
// peer's next hop (the router's port).
func TestLabUpFwRouted(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("fwrt%d", os.Getpid())
	code, up, errs, _ := labUpFw(t, name, "--routed", "--hosts", "3", "--fw-args", "--sleep 50us")
	if code != 0 || len(up.Daemons) != 3 {
		t.Fatalf("lab up --routed --fw: exit %d: %+v %s", code, up, errs)
	}
	serveThrough(t, up.Daemons[1])
	args := []string{"ping", "--api", "amii", "--socket", up.Daemons[0].Socket, "--peer-host", "1", "--count", "200", "--json"}
	code, out, errs := xam(t, nil, args...)
	var r bench.AMIIResult
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 200 || r.Lost != 0 {
		t.Fatalf("%v: exit %d: %s %s", args, code, out, errs)
	}
	s := daemonStats(t, up.Daemons[0].Socket)
	u := s.Link.Encap
	if u == nil || u.Form != "udp:18553" || u.Local != "10.0.1.1:18553" || u.MTU != 1500-28 || u.Stats.Sent < 200 || u.Stats.Received < 200 || len(u.Peers) != 2 {
		t.Fatalf("h0's daemon: link %+v, encap %+v", s.Link, u)
	}
	for _, p := range u.Peers {
		if p.MAC == "" || !strings.HasSuffix(p.Via, ".254") {
			t.Errorf("peer %+v: want resolved, via the router", p)
		}
	}
	for _, h := range s.Hosts {
		if !strings.HasPrefix(h.MAC, "02:75:0a:00:") {
			t.Errorf("host %d known as %s, want the address of its IP", h.ID, h.MAC)
		}
	}
	_, out, _ = xam(t, nil, "fw", "stats", "--socket", up.Daemons[0].Socket)
	if !strings.Contains(out, "xam's UDP form (udp:18553) from 10.0.1.1:18553") || !strings.Contains(out, "peer 10.0.3.1: via 10.0.1.254") {
		t.Errorf("fw stats:\n%s", out)
	}
}

// TestFwEncapUsage: xam fw refuses what the UDP form cannot take.
func TestFwEncapUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dev", "eth0", "--id", "0", "--host", "1=10.0.0.2"}, "--host ID=IP needs --encap udp"},
		{[]string{"--dev", "eth0", "--id", "0", "--encap", "udp", "--host", "1=02:00:00:00:00:01"}, "give every peer as --host ID=IP"},
		{[]string{"--dev", "eth0", "--id", "0", "--encap", "udp6", "--host", "1=10.0.0.2"}, "addresses of the other family"},
		{[]string{"--dev", "eth0", "--map", "--encap", "udp"}, "--map finds hosts on one LAN"},
		{[]string{"--dev", "eth0", "--id", "0", "--encap", "udp:99999", "--host", "1=10.0.0.2"}, "the port is a number"},
		{[]string{"--dev", "eth0", "--id", "0", "--host", "1=nothing"}, "neither a MAC nor an IP address"},
	} {
		if code, _, errs := xam(t, nil, append([]string{"fw"}, c.args...)...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("fw %v: exit %d, %s; want %q", c.args, code, errs, c.want)
		}
	}
}
