package slurmtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/testenv"
)

// startTimeout bounds Start: daemons up and every node idle. Generous, for
// a loaded 2-core machine; it takes about a second.
const startTimeout = 90 * time.Second

// errPortTaken: a daemon found the port picked for it taken.
var errPortTaken = errors.New("slurmtest: a port picked for a daemon was taken")

// Start starts a private Slurm cluster for the test and returns it once every
// node is idle; the test's Cleanup stops it and removes its files (see the
// package documentation).
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cfg := config{nodes: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.nodes < 1 || cfg.nodes > 64 {
		t.Fatalf("slurmtest: %d nodes: want 1 to 64", cfg.nodes)
	}
	if euid := os.Geteuid(); euid != 0 {
		testenv.SkipOrFail(t, "slurmtest: the Slurm daemons need root (euid %d): slurmd launches tasks, munged runs as user munge", euid)
	}
	for _, name := range Commands {
		testenv.RequireCommand(t, name)
	}
	munge, err := user.Lookup("munge")
	if err != nil {
		testenv.SkipOrFail(t, "slurmtest: no user munge (install Debian's munge: scripts/deps.sh): %v", err)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
	host, _, _ = strings.Cut(host, ".")

	dir, err := os.MkdirTemp("", "xam-slurm-")
	if err != nil {
		t.Fatalf("slurmtest: %v", err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Partition: "xam"}
	d := &daemons{c: c}
	t.Cleanup(func() {
		d.stop(t)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("slurmtest: removing %s: %v", dir, err)
		}
	})
	if cfg.nodes == 1 {
		c.Nodes = []string{host}
	} else {
		for i := range cfg.nodes {
			c.Nodes = append(c.Nodes, "n"+strconv.Itoa(i))
		}
	}
	if err := makeDirs(c, munge); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	begin := time.Now()
	if err := d.startMunge(ctx, munge); err != nil {
		t.Fatal(err)
	}
	p := confParams{dir: dir, host: host, nodes: c.Nodes, partition: c.Partition, user: me.Username}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1 + len(c.Nodes))
		if err != nil {
			t.Fatal(err)
		}
		p.ctldPort, p.nodePorts = ports[0], ports[1:]
		c.CtldPort = p.ctldPort
		if err := os.WriteFile(c.Conf, []byte(conf(p)), 0o644); err != nil {
			t.Fatalf("slurmtest: %v", err)
		}
		err = d.startSlurm(ctx)
		if err == nil {
			break
		}
		d.stopSlurm()
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("%v; picking other ports", err)
	}
	c.Started = time.Since(begin)
	t.Logf("%v: up in %v", c, c.Started.Round(time.Millisecond))
	return c
}

// makeDirs creates the cluster's folders and munged's key.
func makeDirs(c *Cluster, munge *user.User) error {
	// munged wants every folder on the way to its socket searchable by all.
	if err := os.Chmod(c.Dir, 0o755); err != nil {
		return fmt.Errorf("slurmtest: %w", err)
	}
	dirs := []string{"munge", "state", "log", "work"}
	for _, n := range c.Nodes {
		dirs = append(dirs, filepath.Join("spool", n))
	}
	for _, sub := range dirs {
		if err := os.MkdirAll(filepath.Join(c.Dir, sub), 0o755); err != nil {
			return fmt.Errorf("slurmtest: %w", err)
		}
	}
	uid, _ := strconv.Atoi(munge.Uid)
	gid, _ := strconv.Atoi(munge.Gid)
	key := make([]byte, 1024)
	rand.Read(key)
	keyPath := filepath.Join(c.Dir, "munge", "munge.key")
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		return fmt.Errorf("slurmtest: %w", err)
	}
	for _, p := range []string{filepath.Join(c.Dir, "munge"), keyPath} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("slurmtest: %w", err)
		}
	}
	return nil
}
