package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw/daemon"
)

// TestZeroCopyFlag: --zerocopy on a veth, whose driver has no AF_XDP
// zero-copy. require fails before anything runs, naming the device and
// the refusal, for ping and for the daemon; auto runs in copy mode and
// says why, in the ping's text and JSON, in the daemon's announcement
// and in `xam fw stats`; off runs in copy mode and says it was asked for.
func TestZeroCopyFlag(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, args := range [][]string{{"ping", "--count", "10"}, {"ping", "--api", "amii", "--count", "10"}} {
		code, _, errs := xam(t, nil, append(args, "--zerocopy", "require")...)
		if code != 1 || !strings.Contains(errs, "zero-copy required (--zerocopy require), and device eth0 (in network namespace ") || !strings.Contains(errs, "refuses it") {
			t.Errorf("%v --zerocopy require on veth: exit %d, %q", args, code, errs)
		}
	}
	for _, c := range []struct{ policy, why string }{{"auto", "eth0's driver (veth) has no AF_XDP zero-copy"}, {"off", "--zerocopy off"}} {
		code, out, errs := xam(t, nil, "ping", "--count", "10", "--zerocopy", c.policy, "--json")
		var r struct {
			Config struct {
				Policy string `json:"zerocopy"`
				Mode   string `json:"xsk_mode"`
				Why    string `json:"xsk_mode_why"`
			} `json:"config"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Config.Policy != c.policy || r.Config.Mode != "copy" || !strings.Contains(r.Config.Why, c.why) {
			t.Errorf("ping --zerocopy %s: exit %d, %+v (%s)", c.policy, code, r.Config, errs)
		}
		code, out, _ = xam(t, nil, "ping", "--count", "10", "--zerocopy", c.policy)
		if code != 0 || !strings.Contains(out, "AF_XDP sockets: copy mode (--zerocopy "+c.policy+"): "+c.why) {
			t.Errorf("ping --zerocopy %s: exit %d\n%s", c.policy, code, out)
		}
	}
	if code, _, errs := xam(t, nil, "ping", "--zerocopy", "maybe"); code != 2 || !strings.Contains(errs, `--zerocopy "maybe": want auto, require or off`) {
		t.Errorf("ping --zerocopy maybe: exit %d, %q", code, errs)
	}

	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("zc%d", os.Getpid()), Hosts: 2, MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	h, peer := l.Hosts[0], l.Hosts[1]
	sock := filepath.Join(t.TempDir(), "fw.sock")
	fw := func(policy string) []string {
		return []string{"fw", "--dev", h.Link, "--netns", h.NS, "--id", "1", "--host", "2=" + peer.MAC.String(), "--socket", sock, "--sleep", "1ms", "--zerocopy", policy}
	}
	if code, _, errs := xam(t, nil, fw("require")...); code != 1 || !strings.Contains(errs, "zero-copy required (--zerocopy require), and device eth0 (in network namespace ") || !strings.Contains(errs, "refuses it") {
		t.Errorf("xam fw --zerocopy require on veth: exit %d, %q", code, errs)
	}
	_, _, stderr := xamProcess(t, fw("auto")...)
	waitLine(t, stderr, "xam fw: AF_XDP socket on eth0 queue 0 in copy mode (--zerocopy auto): eth0's driver (veth) has no AF_XDP zero-copy")
	go func() {
		for stderr.Scan() {
		}
	}()
	s := fwStats(t, sock)
	if l := s.Link; l == nil || l.Device != "eth0" || l.MTU != 9000 || !l.MultiBuffer || l.XSKMode != "copy" || !strings.Contains(l.XSKWhy, "has no AF_XDP zero-copy") {
		t.Errorf("fw stats link: %+v", s.Link)
	}
	if code, out, _ := xam(t, nil, "fw", "stats", "--socket", sock); code != 0 || !strings.Contains(out, "link: eth0 queue 0, MTU 9000, multi-buffer frames, AF_XDP in copy mode: eth0's driver (veth) has no AF_XDP zero-copy") {
		t.Errorf("fw stats: exit %d\n%s", code, out)
	}
}

// TestFwQueues: `xam fw --queues 0-3` owns four queues of a 4-queue veth
// (a socket on each, one UMEM), as `xam fw stats` shows; --queue and
// --queues together are refused, and so are several queues on a device
// whose MTU needs multi-buffer frames, which a shared UMEM does not take.
func TestFwQueues(t *testing.T) {
	testenv.RequirePrivileged(t)
	if code, _, errs := xam(t, nil, "fw", "--dev", "x", "--map", "--queue", "1", "--queues", "0-3"); code != 2 || !strings.Contains(errs, "--queue and --queues: give one") {
		t.Errorf("--queue with --queues: exit %d, %q", code, errs)
	}
	if code, _, errs := xam(t, nil, "fw", "--dev", "x", "--map", "--queues", "2-1"); code != 2 || !strings.Contains(errs, "--queues: ") || !strings.Contains(errs, "queue numbers") {
		t.Errorf("--queues 2-1: exit %d, %q", code, errs)
	}
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("fwq%d", os.Getpid()), Hosts: 2, Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	h, peer := l.Hosts[0], l.Hosts[1]
	sock := filepath.Join(t.TempDir(), "fw.sock")
	_, _, stderr := xamProcess(t, "fw", "--dev", h.Link, "--netns", h.NS, "--id", "1", "--host", "2="+peer.MAC.String(), "--socket", sock, "--sleep", "1ms", "--queues", "0-3")
	waitLine(t, stderr, "xam fw: AF_XDP sockets on eth0 queues [0 1 2 3] (one UMEM) in copy mode")
	go func() {
		for stderr.Scan() {
		}
	}()
	s := fwStats(t, sock)
	if l := s.Link; l == nil || fmt.Sprint(l.Queues) != "[0 1 2 3]" {
		t.Errorf("fw stats link: %+v", s.Link)
	}
	if code, out, _ := xam(t, nil, "fw", "stats", "--socket", sock); code != 0 || !strings.Contains(out, "link: eth0 queues [0 1 2 3], MTU 1500") {
		t.Errorf("fw stats: exit %d\n%s", code, out)
	}

	jl, err := lab.Up(lab.Config{Name: fmt.Sprintf("fwqj%d", os.Getpid()), Hosts: 2, Queues: 2, MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jl.Down() })
	jh := jl.Hosts[0]
	code, _, errs := xam(t, nil, "fw", "--dev", jh.Link, "--netns", jh.NS, "--id", "1", "--host", "2="+jl.Hosts[1].MAC.String(),
		"--socket", filepath.Join(t.TempDir(), "j.sock"), "--queues", "0-1")
	if code != 1 || !strings.Contains(errs, "MTU 9000 needs multi-buffer frames, which sockets on several queues (a shared UMEM) do not take") {
		t.Errorf("--queues on MTU 9000: exit %d, %q", code, errs)
	}
}

// TestFwTuneNAPI: `xam fw --tune-napi`, run where sysfs is the device's
// namespace's (ip netns exec), sets napi_defer_hard_irqs and
// gro_flush_timeout for preferred busy polling while it runs and puts the
// values back when it stops; doctor advises it while they are 0. Through
// --netns, where sysfs shows another namespace's devices, it refuses
// rather than tune a device of the same name elsewhere. fw stats says why
// a veth has no busy polling.
func TestFwTuneNAPI(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("napi%d", os.Getpid()), Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	h, peer := l.Hosts[0], l.Hosts[1]
	sysfs := func() string {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", h.NS, "cat", "/sys/class/net/eth0/napi_defer_hard_irqs", "/sys/class/net/eth0/gro_flush_timeout").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got := sysfs(); got != "0 0" {
		t.Fatalf("a new veth's napi_defer_hard_irqs and gro_flush_timeout: %s", got)
	}
	sock := filepath.Join(t.TempDir(), "fw.sock")
	args := []string{"fw", "--dev", "eth0", "--id", "1", "--host", "2=" + peer.MAC.String(), "--socket", sock, "--sleep", "1ms", "--tune-napi"}
	if code, _, errs := xam(t, nil, append(args, "--netns", h.NS)...); code != 1 || !strings.Contains(errs, "--tune-napi: netdev: tuning eth0: sysfs shows another network namespace's devices") {
		t.Errorf("--tune-napi through --netns: exit %d, %q", code, errs)
	}
	if got := sysfs(); got != "0 0" {
		t.Fatalf("after the refusal: %s", got)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS, os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	waitLine(t, sc, "xam fw: eth0: napi_defer_hard_irqs 2, gro_flush_timeout 200000 ns while the daemon runs")
	waitLine(t, sc, "xam fw: AF_XDP socket on eth0 queue 0")
	go func() {
		for sc.Scan() {
		}
	}()
	if got := sysfs(); got != "2 200000" {
		t.Errorf("while the daemon runs: %s, want 2 200000", got)
	}
	s := fwStats(t, sock)
	if l := s.Link; l == nil || l.BusyPoll || !strings.Contains(l.BusyPollWhy, "no NAPI instance") {
		t.Errorf("fw stats link: %+v", s.Link)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := sysfs(); got != "0 0" {
		t.Errorf("after the daemon stopped: %s, want 0 0 again", got)
	}
	out, err := exec.Command("ip", "netns", "exec", h.NS, os.Args[0], "doctor", "--dev", "eth0", "--json").Output()
	var doc struct {
		Advice []string `json:"advice"`
	}
	if err != nil || json.Unmarshal(out, &doc) != nil || len(doc.Advice) != 1 || !strings.Contains(doc.Advice[0], "xam fw --tune-napi") {
		t.Errorf("doctor's advice: %s (%v)", out, err)
	}
}

// fwStats returns the statistics of the daemon at sock, asked with `xam
// fw stats --json` until it answers (it may be starting).
func fwStats(t *testing.T, sock string) daemon.Stats {
	t.Helper()
	for bound := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var s daemon.Stats
		code, out, errs := xam(t, nil, "fw", "stats", "--socket", sock, "--json")
		if code == 0 && json.Unmarshal([]byte(out), &s) == nil {
			return s
		}
		if time.Now().After(bound) {
			t.Fatalf("no stats from the daemon at %s: %s", sock, errs)
		}
	}
}

// TestStatQueues: xam's frames that land on queues without a socket are
// counted per queue by the program, and `xam stat` and `xam doctor` show
// where they landed and advise what to do.
func TestStatQueues(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("statq%d", os.Getpid()), Hosts: 2, Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	a, b := l.Hosts[0], l.Hosts[1]
	rx, err := datapath.Open(datapath.OnHost(b), loader.ModeGeneric, 0) // a socket on queue 0 only
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var senders []*afxdp.Socket
	if err := a.Do(func() (err error) {
		senders, err = afxdp.OpenShared(a.Index, []int{0, 1, 2, 3}, afxdp.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range senders {
			s.Close()
		}
	}()
	c := make(cells.Cell, cells.CellSize)
	if err := c.Encode(cells.UNI, cells.Fields{VCI: 32, PTI: cells.PTIEndOfMessage}); err != nil {
		t.Fatal(err)
	}
	frame, err := (&cells.Framer{Dst: b.MAC, Src: a.MAC, MTU: 1500}).Append(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range senders {
		for range 50 {
			if _, err := s.Send([][]byte{frame}); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, out, errs := xam(t, nil, "stat", "--dev", "eth0", "--netns", b.NS)
	if code != 0 || !strings.Contains(out, "with no socket on the queue") || !strings.Contains(out, "advice: xam frames land on queues") {
		t.Errorf("xam stat: exit %d %s\n%s", code, errs, out)
	}
	code, out, errs = xam(t, nil, "doctor", "--dev", "eth0", "--netns", b.NS, "--json")
	var r struct {
		Queues []loader.QueueCount `json:"queues"`
		Advice []string            `json:"advice"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.Queues) < 2 || len(r.Advice) == 0 || !strings.Contains(strings.Join(r.Advice, "\n"), "xam fw --queues") {
		t.Errorf("xam doctor: exit %d %s\n%s", code, errs, out)
	}
	var frames, missed uint64
	for _, q := range r.Queues {
		frames, missed = frames+q.Frames, missed+q.NoSocket
	}
	if frames != 4*50 || missed == 0 || missed == frames {
		t.Errorf("doctor's queues: %+v", r.Queues)
	}
}

// TestPingTimestamps: `xam ping --api raw --timestamps` reads the receive
// metadata that the device-bound program puts in front of every answer,
// and says that a veth gives no hardware stamp; it is refused for the
// other APIs and for the serving side.
func TestPingTimestamps(t *testing.T) {
	testenv.RequirePrivileged(t)
	code, out, errs := xam(t, nil, "ping", "--api", "raw", "--timestamps", "--count", "50", "--json")
	var r struct {
		Warmup   int `json:"warmup"`
		Count    int `json:"count"`
		RxStamps *struct {
			Answers  int `json:"answers"`
			WithMeta int `json:"with_meta"`
			Stamped  int `json:"stamped"`
		} `json:"rx_stamps"`
		TxStamps *struct {
			Requests int   `json:"requests"`
			Stamped  int   `json:"stamped"`
			AppToTx  int64 `json:"app_to_tx_p50_ns"`
		} `json:"tx_stamps"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.RxStamps == nil || r.RxStamps.Answers != r.Count+r.Warmup ||
		r.RxStamps.WithMeta != r.RxStamps.Answers || r.RxStamps.Stamped != 0 ||
		r.TxStamps == nil || r.TxStamps.Stamped != r.TxStamps.Requests || r.TxStamps.Requests != r.Count+r.Warmup || r.TxStamps.AppToTx <= 0 {
		t.Errorf("ping --timestamps --json: exit %d %s\n%s", code, errs, out)
	}
	if code, out, errs := xam(t, nil, "ping", "--api", "raw", "--timestamps", "--count", "20"); code != 0 || !strings.Contains(out, "RX stamps: no hardware stamp: 0 of 22 answers stamped by the NIC") ||
		!strings.Contains(out, "TX stamps: 22 of 22 requests stamped") || !strings.Contains(out, "round trip split: none") {
		t.Errorf("ping --timestamps: exit %d %s\n%s", code, errs, out)
	}
	for _, args := range [][]string{{"--api", "amii"}, {"--api", "raw", "--dev", "eth0", "--serve"}} {
		if code, _, errs := xam(t, nil, append([]string{"ping", "--timestamps"}, args...)...); code != 2 || !strings.Contains(errs, "--timestamps") {
			t.Errorf("ping --timestamps %v: exit %d, %q", args, code, errs)
		}
	}
}

// TestFwSteer: --steer asks the device for an n-tuple rule toward the
// daemon's queue; a veth takes none, and the daemon says so and stops
// before it serves. --steer with several queues is refused.
func TestFwSteer(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("steer%d", os.Getpid()), Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	h, peer := l.Hosts[0], l.Hosts[1]
	sock := filepath.Join(t.TempDir(), "fw.sock")
	args := []string{"fw", "--dev", "eth0", "--netns", h.NS, "--id", "1", "--host", "2=" + peer.MAC.String(), "--socket", sock, "--steer"}
	if code, _, errs := xam(t, nil, args...); code != 1 || !strings.Contains(errs, "--steer: netdev: eth0: the device takes no n-tuple steering rules") {
		t.Errorf("--steer on a veth: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the daemon served after --steer failed")
	}
	if code, _, errs := xam(t, nil, append(args, "--queues", "0,1")...); code != 2 || !strings.Contains(errs, "--steer steers to the one --queue") {
		t.Errorf("--steer --queues: exit %d, %q", code, errs)
	}
}

// TestFwTimestamps: daemons started with --timestamps load the metadata
// program and their engines count every frame's receive metadata; a
// veth's NIC stamps none, and xam fw stats says so. --timestamps with
// --queues or --encap is refused.
func TestFwTimestamps(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("fwts%d", os.Getpid())
	code, up, errs, _ := labUpFw(t, name, "--fw-args", "--timestamps --sleep 50us")
	if code != 0 || len(up.Daemons) != 2 {
		t.Fatalf("lab up --fw --fw-args --timestamps: exit %d: %s", code, errs)
	}
	serveThrough(t, up.Daemons[1])
	args := append(strings.Fields(up.Daemons[0].Ping)[1:], "--count", "100", "--json")
	if code, out, errs := xam(t, nil, args...); code != 0 {
		t.Fatalf("%v: exit %d: %s %s", args, code, out, errs)
	}
	s := daemonStats(t, up.Daemons[1].Socket)
	if tr := s.Transport; tr.RxMeta < 100 || tr.RxStamped != 0 {
		t.Errorf("the serving daemon's transport: %d frames with metadata, %d stamped; want at least 100, none (veth)", tr.RxMeta, tr.RxStamped)
	}
	if _, out, _ := xam(t, nil, "fw", "stats", "--socket", up.Daemons[1].Socket); !strings.Contains(out, "receive stamps (--timestamps):") || !strings.Contains(out, "no NIC stamp (a veth never stamps)") {
		t.Errorf("fw stats:\n%s", out)
	}
	for _, extra := range [][]string{{"--queues", "0,1"}, {"--encap", "udp", "--host", "2=10.0.0.2"}} {
		a := append([]string{"fw", "--dev", "eth0", "--id", "1", "--timestamps"}, extra...)
		if extra[0] == "--queues" {
			a = append(a, "--host", "2=02:00:00:00:00:02")
		}
		if code, _, errs := xam(t, nil, a...); code != 2 || !strings.Contains(errs, "--timestamps takes one --queue and raw frames") {
			t.Errorf("%v: exit %d, %q", a, code, errs)
		}
	}
}
