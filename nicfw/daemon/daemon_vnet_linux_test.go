//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
)

// TestWeakTag: the rule for weak tags, and NewTag's draws.
func TestWeakTag(t *testing.T) {
	for _, tc := range []struct {
		tag  uint64
		weak bool
	}{
		{0, true}, {1, true}, {0xa11, true}, {0x6772696d, true}, {0xffffffff, true},
		{1 << 40, true}, {0xffff_ffff_ffff_ffff, true}, {0xfff0_0000_0000_0000, true},
		{0x9e37_79b9_7f4a_7c15, false}, {0x0123_4567_89ab_cdef, false},
	} {
		if got := WeakTag(tc.tag); got != tc.weak {
			t.Errorf("WeakTag(%#x) = %v, want %v", tc.tag, got, tc.weak)
		}
	}
	seen := map[uint64]bool{}
	for range 10000 {
		tag := NewTag()
		if WeakTag(tag) || seen[tag] {
			t.Fatalf("NewTag gave %#x: weak %v, seen before %v", tag, WeakTag(tag), seen[tag])
		}
		seen[tag] = true
	}
}

// TestDaemonNewTags: an open with tag 0 makes a new virtual network whose
// tag the daemon draws at random and the reply carries; two such opens
// make two networks with different tags, neither weak; the creator opens
// more endpoints of its network with the tag. Before, tag 0 was one more
// tag, shared by everyone who left it unset.
func TestDaemonNewTags(t *testing.T) {
	d, path, _ := hostileDaemon(t, Config{})
	a := dial(t, path, OpenRequest{Table: oneEntry})
	b := dial(t, path, OpenRequest{Table: oneEntry})
	if a.Tag == 0 || b.Tag == 0 || a.Tag == b.Tag || WeakTag(a.Tag) || WeakTag(b.Tag) {
		t.Fatalf("two new networks: tags %#x and %#x, want two different strong tags", a.Tag, b.Tag)
	}
	c := dial(t, path, OpenRequest{Tag: a.Tag, Table: oneEntry})
	if c.Tag != a.Tag {
		t.Errorf("joined %#x, reply says %#x", a.Tag, c.Tag)
	}
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[nicfw.EndpointID]uint64{}
	for _, ep := range s.List {
		tags[ep.ID] = ep.Tag
	}
	if tags[a.ID] != a.Tag || tags[b.ID] != b.Tag || tags[c.ID] != a.Tag {
		t.Errorf("the engine's endpoints %+v, want %d and %d on %#x, %d on %#x", s.List, a.ID, c.ID, a.Tag, b.ID, b.Tag)
	}
	nets := map[uint64]int{}
	for _, n := range s.Networks {
		nets[n.Tag] = n.Endpoints
		if n.Creator != uint32(os.Getuid()) {
			t.Errorf("network %#x made by uid %d, want %d", n.Tag, n.Creator, os.Getuid())
		}
	}
	if len(nets) != 2 || nets[a.Tag] != 2 || nets[b.Tag] != 1 {
		t.Errorf("networks %+v", s.Networks)
	}
	// The network goes with its last endpoint.
	b.Close()
	if s, _ := d.Stats(); len(s.Networks) != 1 || s.Networks[0].Tag != a.Tag {
		t.Errorf("after the close of %#x's last endpoint: networks %+v", b.Tag, s.Networks)
	}
}

// otherUser returns a command that runs this test binary's test named run
// as uid and gid (no supplementary groups), with env added.
func otherUser(t *testing.T, uid, gid uint32, run string, env ...string) *exec.Cmd {
	t.Helper()
	dir := openDir(t)
	bin := filepath.Join(dir, "daemon.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+run+"$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	return cmd
}

// TestDaemonVirtualNetworkUsers: a virtual network's endpoints are opened
// only by the users its creator lets in, checked with the peer's
// credentials. uid 65534 cannot open an endpoint of root's network, even
// with its tag, nor grant itself in, nor make a network with a weak tag,
// and `stats` shows it no tag but its own; with a grant of its uid, or of
// its gid, it opens one; revoked, it cannot again; a process in the
// creator's group (gid 0 here) may by default. Before, any user opened
// any tag (uid 65534 joined root's virtual network and exchanged round
// trips with its server) and read every tag in `xam fw stats`.
func TestDaemonVirtualNetworkUsers(t *testing.T) {
	testenv.RequirePrivileged(t)
	_, path, _ := hostileDaemon(t, Config{})
	root := dial(t, path, OpenRequest{Table: oneEntry})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	child := func(gid uint32, actions ...string) string {
		t.Helper()
		cmd := otherUser(t, 65534, gid, "TestDaemonTagChild", "XAM_TEST_TAG_SOCKET="+path,
			"XAM_TEST_TAG_ACTIONS="+strings.Join(actions, " "))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %v: %v\n%s", actions, err, out)
		}
		return string(out)
	}
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("no %q in the child's output:\n%s", w, out)
			}
		}
	}
	join := fmt.Sprintf("join=%#x", root.Tag)
	grant := fmt.Sprintf("grant=%#x", root.Tag)
	out := child(65534, join, grant, "weak", "new", "stats")
	t.Logf("uid 65534:\n%s", out)
	expect(out, join+": permission", grant+": permission", "weak: weak_tag", "new: ok",
		fmt.Sprintf("stats: endpoint %d tag 0x0", root.ID), "stats: own endpoint tag shown", "stats: networks 1 (own)")
	if strings.Contains(out, fmt.Sprintf("stats: endpoint %d tag %#x", root.ID, root.Tag)) {
		t.Errorf("the child read root's tag:\n%s", out)
	}

	// In the creator's group: let in by default.
	expect(child(0, join), join+": ok")

	// A grant of the uid, then of the gid, each revoked.
	uid, gid := uint32(65534), uint32(65534)
	for _, g := range []GrantRequest{{Tag: root.Tag, UID: &uid}, {Tag: root.Tag, GID: &gid}} {
		if err := c.Grant(g); err != nil {
			t.Fatal(err)
		}
		expect(child(65534, join), join+": ok")
		g.Revoke = true
		if err := c.Grant(g); err != nil {
			t.Fatal(err)
		}
		expect(child(65534, join), join+": permission")
	}
	// Grants only on a network of this daemon.
	if err := c.Grant(GrantRequest{Tag: NewTag(), UID: &uid}); !errors.Is(err, ErrNoNetwork) {
		t.Errorf("a grant on an unknown tag: %v, want ErrNoNetwork", err)
	}
	if err := c.Grant(GrantRequest{Tag: root.Tag}); !errors.Is(err, nicfw.ErrConfig) {
		t.Errorf("a grant to nobody: %v, want ErrConfig", err)
	}
}

// TestDaemonTagChild is the child process of
// TestDaemonVirtualNetworkUsers: it runs the actions it is given on the
// daemon and prints what came of each.
func TestDaemonTagChild(t *testing.T) {
	path := os.Getenv("XAM_TEST_TAG_SOCKET")
	if path == "" {
		t.Skip("the child process of TestDaemonVirtualNetworkUsers")
	}
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var own *Endpoint
	for _, a := range strings.Fields(os.Getenv("XAM_TEST_TAG_ACTIONS")) {
		verb, arg, _ := strings.Cut(a, "=")
		tag, _ := strconv.ParseUint(arg, 0, 64)
		switch verb {
		case "join":
			ep, err := c.Open(OpenRequest{Tag: tag, Table: oneEntry})
			if err == nil {
				ep.Close()
				fmt.Printf("%s: ok\n", a)
				continue
			}
			fmt.Printf("%s: %s (%v)\n", a, errorKind(err), err)
		case "grant":
			me := uint32(os.Getuid())
			fmt.Printf("%s: %s\n", a, errorKind(c.Grant(GrantRequest{Tag: tag, UID: &me})))
		case "weak":
			_, err := c.Open(OpenRequest{Tag: 0x5eed, Table: oneEntry})
			fmt.Printf("%s: %s\n", a, errorKind(err))
		case "new":
			if own, err = c.Open(OpenRequest{Table: oneEntry}); err != nil {
				fmt.Printf("%s: %s\n", a, errorKind(err))
				continue
			}
			defer own.Close()
			fmt.Printf("%s: ok\n", a)
		case "stats":
			s, err := c.Stats()
			if err != nil {
				t.Fatal(err)
			}
			for _, ep := range s.List {
				if own != nil && ep.ID == own.ID {
					if ep.Tag == own.Tag {
						fmt.Println("stats: own endpoint tag shown")
					}
					continue
				}
				fmt.Printf("stats: endpoint %d tag %#x\n", ep.ID, ep.Tag)
			}
			if len(s.Networks) == 1 && own != nil && s.Networks[0].Tag == own.Tag {
				fmt.Println("stats: networks 1 (own)")
			} else {
				fmt.Printf("stats: networks %+v\n", s.Networks)
			}
		}
	}
}

// TestDaemonNetworkKey: a virtual network's first endpoint sets its key
// (nicfw.VNet.Key); later opens of the tag must give the same key, else
// ErrPermission (another key, none, or one for a network made without);
// a key of a wrong length is ErrConfig.
func TestDaemonNetworkKey(t *testing.T) {
	_, path, _ := hostileDaemon(t, Config{})
	key, err := nicfw.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := nicfw.NewKey()
	a := dial(t, path, OpenRequest{Table: oneEntry, Key: key})
	dial(t, path, OpenRequest{Tag: a.Tag, Table: oneEntry, Key: key})
	plain := dial(t, path, OpenRequest{Table: oneEntry})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		req  OpenRequest
		want error
	}{
		{OpenRequest{Tag: a.Tag, Table: oneEntry, Key: other}, ErrPermission},
		{OpenRequest{Tag: a.Tag, Table: oneEntry}, ErrPermission},
		{OpenRequest{Tag: plain.Tag, Table: oneEntry, Key: key}, ErrPermission},
		{OpenRequest{Table: oneEntry, Key: key[:5]}, nicfw.ErrConfig},
	} {
		if ep, err := c.Open(tc.req); !errors.Is(err, tc.want) {
			if ep != nil {
				ep.Close()
			}
			t.Errorf("open of tag %#x with a key of %d bytes: %v, want %v", tc.req.Tag, len(tc.req.Key), err, tc.want)
		}
	}
}
