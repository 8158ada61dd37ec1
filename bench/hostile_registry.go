package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/grim/storage"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// The registry scenario: root's GRIM cluster on a virtual network of its
// own — the registry's central endpoint on A, which is also the client of
// a block store on B (names "storage.*" bound to the store) — and uid
// 65534, granted that network on both daemons but in nobody's
// Config.Peers (a stranger, as a user of a shared network is), attacking
// it from an endpoint on A while root writes and reads blocks: tables
// that give "storage.read" and "storage.write" to itself, one of
// generation 0xFFFFFFFF to pin it, to the central and to the store;
// registrations of those names at the central; writes over block 0 and
// reads past the store's end to every handler id a store may use. It is
// made from docs/grim.md ("The registry's messages"), as an attacker
// would make it. Every one must be dropped and counted, root's reads must
// return what root wrote, and the names must stay the store's.

// registryOrders tells the attacker to attack a GRIM cluster.
type registryOrders struct {
	Socket  string       `json:"socket"` // the daemon it opens its endpoint on (host A)
	Tag     uint64       `json:"tag"`
	Members []nicfw.Name `json:"members"` // root's Config.Peers
	Squat   nicfw.Name   `json:"squat"`   // an id of a member's range, which it tries first
	Self    nicfw.Name   `json:"self"`    // its own endpoint
}

// registryTally is what the attacker sent.
type registryTally struct {
	Tables, Registrations, Writes, Reads int
	Refused                              int  // sends that timed out or failed (its channel full of unanswered requests)
	SquatRefused                         bool // its open of an id of a member's range was refused (ErrEndpointInUse)
}

// registryBlocks is the blocks root writes, and the store's size.
const (
	registryBlocks    = 8
	registryBlockSize = 512
	registryCentral   = 200
	registryStore     = 201
	registrySquat     = 203 // in the central's range of channel ids
	registryStranger  = 300
)

// forgedTable encodes a table (docs/grim.md) that gives names to owner,
// the handler ids from id.
func forgedTable(names []string, id uint32, owner nicfw.Name) []byte {
	var b []byte
	for i, name := range names { // sorted by the caller
		b = binary.BigEndian.AppendUint32(b, id+uint32(i))
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = binary.BigEndian.AppendUint16(b, 1)
		b = binary.BigEndian.AppendUint16(b, uint16(owner.Host))
		b = binary.BigEndian.AppendUint16(b, uint16(owner.Endpoint))
	}
	return b
}

// attackRegistry carries out o until in ends, writing "attacking" to out
// after its first round.
func attackRegistry(o registryOrders, in io.Reader, out io.Writer) (*registryTally, error) {
	t := &registryTally{}
	dial := func(peers []nicfw.Name) (*grim.Endpoint, error) {
		return grim.Dial(o.Socket, grim.Config{Tag: o.Tag, Peers: peers, Self: len(peers) - 1,
			ReplyTimeout: 20 * time.Millisecond, GiveUp: 50 * time.Millisecond})
	}
	// An unused channel id of the central's, which the members' tables
	// name as the central's: it would speak as the central. Alone in its
	// Peers: grim's own check refuses peers whose channels share
	// endpoints, and the daemon must refuse the id whatever the Peers.
	if sq, err := dial([]nicfw.Name{o.Squat}); err == nil {
		sq.Close()
	} else if errors.Is(err, nicfw.ErrEndpointInUse) {
		t.SquatRefused = true
	} else {
		return nil, fmt.Errorf("the squat: %w", err)
	}
	ep, err := dial(append(append([]nicfw.Name(nil), o.Members...), o.Self))
	if err != nil {
		return nil, fmt.Errorf("the stranger's endpoint: %w", err)
	}
	defer ep.Close()
	ch, err := ep.Channel(0)
	if err != nil {
		return nil, err
	}
	var done atomic.Bool
	go func() {
		io.Copy(io.Discard, in) //nolint:errcheck // any end stops it
		done.Store(true)
	}()
	table := forgedTable([]string{"storage.read", "storage.write"}, uint32(grim.FirstUserHandler)+24, o.Self)
	junk := bytes.Repeat([]byte{0xa5}, registryBlockSize)
	send := func(n *int, err error) {
		*n++
		if err != nil {
			t.Refused++
		}
	}
	for round := 0; !done.Load(); round++ {
		for peer := range o.Members {
			for _, gen := range []uint32{1, 2, 0xFFFFFFFF} {
				send(&t.Tables, ch.Bulk(peer, grim.HandlerTable, table, gen))
			}
		}
		send(&t.Registrations, ch.Bulk(0, grim.HandlerRegister, table))
		// The store's handlers, guessed: a write over block 0 (first
		// block, completion handler, tag) and a read past the end
		// (first block, count, data handler, tag).
		for h := grim.FirstUserHandler; h < grim.FirstUserHandler+32; h++ {
			send(&t.Writes, ch.Bulk(1, h, junk, 0, uint32(grim.FirstUserHandler), uint32(round)))
			send(&t.Reads, ch.Short(1, h, 0xFFFFFFF, 1, uint32(grim.FirstUserHandler), uint32(round)))
		}
		if _, err := ep.Poll(); err != nil {
			return nil, err
		}
		if round == 0 {
			if _, err := fmt.Fprintln(out, "attacking"); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// b2u is 1 for true.
func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// blockPattern is block k's bytes as root writes them.
func blockPattern(k int) []byte {
	b := make([]byte, registryBlockSize)
	for i := range b {
		b[i] = byte(i*13 + k*7 + 1)
	}
	return b
}

// hostileRegistry runs the registry scenario; the attacker's executable is
// in dir (copyAttacker).
func hostileRegistry(ha, hb *firmwareHost, _, _ datapath.Place, cfg hostileConfig, dir string) (hostileRow, error) {
	row := hostileRow{Scenario: "registry", Attack: "uid 65534, granted the network, not a member: forged tables and registrations, writes over block 0, reads past the end"}
	tag := daemon.NewTag()
	members := []nicfw.Name{{Host: amiiHostA, Endpoint: registryCentral}, {Host: amiiHostB, Endpoint: registryStore}}
	rc := &registryCluster{}
	defer rc.close()
	if err := rc.open(ha, hb, tag, members, dir); err != nil {
		return row, err
	}
	// Root lets uid 65534 into its network on both daemons.
	if err := grantAttacker(tag, ha.sock, hb.sock); err != nil {
		return row, err
	}
	orders, err := json.Marshal(attackerOrders{Registry: &registryOrders{Socket: ha.sock, Tag: tag, Members: members,
		Squat: nicfw.Name{Host: amiiHostA, Endpoint: registrySquat}, Self: nicfw.Name{Host: amiiHostA, Endpoint: registryStranger}}})
	if err != nil {
		return row, err
	}
	var t registryTally
	pings, err := pingWhile(ha, hb, cfg.Pings, func(stop *atomic.Bool, start func()) error {
		return runAttacker(dir, orders, &t, func() error {
			start()
			return rc.readWrite(stop)
		})
	})
	if err != nil {
		return row, err
	}
	row.Sent = t.Tables + t.Registrations + t.Writes + t.Reads
	row.set(pings)
	rc.judge(&row, t)
	return row, nil
}

// registryCluster is root's GRIM cluster of the registry scenario: the
// registry's central endpoint on A, the block store's endpoint on B, the
// store and its file, and the central's client of the store; and what
// root's reads and writes came to while the attacker ran.
type registryCluster struct {
	central, dev *grim.Endpoint
	f            *os.File
	store        *storage.Store
	stopStore    func() error
	client       *storage.Client
	ops, wrong   int // root's reads and writes, and its reads that returned other bytes
}

// open opens the cluster on A's and B's daemons, members its members (the
// central first), and writes every block through the client.
func (rc *registryCluster) open(ha, hb *firmwareHost, tag uint64, members []nicfw.Name, dir string) error {
	gcfg := func(self int) grim.Config {
		return grim.Config{Tag: tag, Peers: members, Self: self, Bind: map[string]int{"storage.": 1}, GiveUp: time.Minute}
	}
	central, err := grim.Dial(ha.sock, gcfg(0))
	if err != nil {
		return err
	}
	rc.central = central
	dev, err := grim.Dial(hb.sock, gcfg(1))
	if err != nil {
		return err
	}
	rc.dev = dev
	f, err := os.CreateTemp(dir, "store-")
	if err != nil {
		return err
	}
	rc.f = f
	if err := rc.startStore(); err != nil {
		return err
	}
	if err := central.Publish(); err != nil {
		return err
	}
	if rc.client, err = storage.Open(central, "storage", grim.FirstUserHandler, registryBlockSize, 10*time.Second); err != nil {
		return err
	}
	for k := range registryBlocks {
		if err := rc.client.Write(k, blockPattern(k)); err != nil {
			return err
		}
	}
	return nil
}

// startStore makes the block store on B's endpoint, polling the central
// while the store publishes with it, and serves the store.
func (rc *registryCluster) startStore() error {
	ready := make(chan error, 1)
	var store *storage.Store
	go func() {
		var err error
		store, err = storage.New(rc.dev, rc.f, storage.Config{BlockSize: registryBlockSize, Blocks: registryBlocks})
		ready <- err
	}()
	for published := false; !published; { // the central runs while the store publishes
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
			published = true
		default:
			if _, err := rc.central.Poll(); err != nil {
				return err
			}
		}
	}
	rc.store = store
	rc.stopStore = serveGRIM(rc.dev, store.Poll)
	return nil
}

// close stops and closes what open started, the last first.
func (rc *registryCluster) close() {
	if rc.stopStore != nil {
		rc.stopStore()
	}
	if rc.f != nil {
		rc.f.Close()
	}
	if rc.dev != nil {
		rc.dev.Close()
	}
	if rc.central != nil {
		rc.central.Close()
	}
}

// readWrite is root's reads and writes, which go on throughout the
// attack, until stop: each block read and checked, then written again.
func (rc *registryCluster) readWrite(stop *atomic.Bool) error {
	buf := make([]byte, registryBlockSize)
	for k := 0; !stop.Load(); k = (k + 1) % registryBlocks {
		if err := rc.client.Read(k, buf); err != nil {
			return fmt.Errorf("root's read of block %d: %w", k, err)
		}
		if !bytes.Equal(buf, blockPattern(k)) {
			rc.wrong++
		}
		if err := rc.client.Write(k, blockPattern(k)); err != nil {
			return fmt.Errorf("root's write of block %d: %w", k, err)
		}
		rc.ops += 2
	}
	return nil
}

// judge fills in row's counters from the cluster's stats and the
// attacker's tally t, and fails it if the attacker got anywhere: its squat
// was let in, root read other bytes, the names moved from the store, or
// nothing of the attacker's arrived (so nothing was tested).
func (rc *registryCluster) judge(row *hostileRow, t registryTally) {
	// The store's goroutine owns its endpoint until it stops: stop it
	// before reading its counters (close's stop is then a no-op).
	if err := rc.stopStore(); err != nil {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; the store stopped: %v", err)
	}
	cs, ds, ss := rc.central.Stats(), rc.dev.Stats(), rc.store.Stats()
	row.Counted = map[string]uint64{
		"strangers' messages dropped":     cs.Strangers + ds.Strangers,
		"tables refused":                  cs.Refused + ds.Refused + cs.BadTables + ds.BadTables,
		"reads the store left unanswered": ss.Unanswered,
		"root's reads and writes":         uint64(rc.ops),
		"a member's channel id refused":   b2u(t.SquatRefused),
	}
	var bad []string
	if !t.SquatRefused {
		bad = append(bad, "it opened an unused channel id of the central's")
	}
	if rc.wrong > 0 {
		bad = append(bad, fmt.Sprintf("%d of root's reads returned other bytes", rc.wrong))
	}
	for _, ep := range []*grim.Endpoint{rc.central, rc.dev} {
		if peer, _, err := ep.Owner("storage.read"); err != nil || peer != 1 {
			bad = append(bad, fmt.Sprintf("storage.read at peer %d (%v)", peer, err))
		}
	}
	if cs.Handled+cs.ReplyHandled == 0 || cs.Strangers+ds.Strangers == 0 {
		bad = append(bad, fmt.Sprintf("nothing of the stranger's arrived: %+v %+v", cs, ds))
	}
	if len(bad) > 0 {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; %q", bad)
	}
}

// grantAttacker grants uid 65534 the network tag on the daemons at socks.
func grantAttacker(tag uint64, socks ...string) error {
	uid := uint32(attackerUID)
	for _, sock := range socks {
		c, err := daemon.Dial(sock)
		if err != nil {
			return err
		}
		err = c.Grant(daemon.GrantRequest{Tag: tag, UID: &uid})
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// runAttacker runs the attacker (copyAttacker's copy in dir) as uid 65534
// with orders, calls during once it has started its attack, then ends it
// (closing its standard input) and reads its tally into tally.
func runAttacker(dir string, orders []byte, tally any, during func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "attacker"))
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), hostileAttackerEnv+"="+string(orders))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackerUID, Gid: attackerUID, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("the attacker as uid %d: %w", attackerUID, err)
	}
	sc := bufio.NewScanner(stdout)
	var last string
	for sc.Scan() {
		if last = sc.Text(); last == "attacking" {
			break
		}
	}
	var derr error
	if last == "attacking" {
		derr = during()
	}
	stdin.Close()
	for sc.Scan() {
		last = sc.Text()
	}
	if err := cmd.Wait(); err != nil {
		return errors.Join(derr, fmt.Errorf("the attacker: %w: %s", err, bytes.TrimSpace(stderr.Bytes())))
	}
	if derr != nil {
		return derr
	}
	if err := json.Unmarshal([]byte(last), tally); err != nil {
		return fmt.Errorf("the attacker's tally %q: %w", last, err)
	}
	return nil
}
