package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/testenv"
)

// TestWiresharkDissector captures live lab traffic of three kinds with
// `xam capture --format ether` on a switch port (SSAM single-cell and bulk
// messages, the firmware transport carrying AM-II's short messages in
// compact cells) and has tshark decode the file with tools/wireshark/xam.lua:
// every frame is xam's, every layer's fields are there, every HEC and CRC
// is correct, and nothing is malformed or raises a Lua error.
func TestWiresharkDissector(t *testing.T) {
	testenv.RequirePrivileged(t)
	tshark := testenv.RequireCommand(t, "tshark")
	script, err := filepath.Abs("../../tools/wireshark/xam.lua")
	if err != nil {
		t.Fatal(err)
	}
	l, c := switchCapture(t, "wsk", defaultCaptureBuffer)
	a, b := l.Hosts[0], l.Hosts[1]
	path := filepath.Join(t.TempDir(), "xam.pcapng")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := newCaptureSink(f, "ether", l.Switch.Ports[0])
	if err != nil {
		t.Fatal(err)
	}
	var stop sync.WaitGroup
	var capErr error
	var finished = make(chan struct{})
	stop.Go(func() {
		capErr = c.run(sink, 0, func() bool {
			select {
			case <-finished:
				return true
			default:
				return false
			}
		})
	})
	pa := bench.Place{Ifindex: a.Index, MAC: a.MAC, Do: a.Do}
	pb := bench.Place{Ifindex: b.Index, MAC: b.MAC, Do: b.Do}
	cfg := bench.PingConfig{Count: 50, NoWarmup: true}
	if _, err := bench.SSAMPing(pa, pb, cfg, 0, ssam.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bench.SSAMBulk(pa, pb, 100_000, 4000, 0, ssam.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bench.AMIIPing(pa, pb, cfg, 0); err != nil { // 32 bytes: four arguments, AAL5 PDUs
		t.Fatal(err)
	}
	cfg.Size = 16 // two arguments: compact cells
	if _, err := bench.AMIIPing(pa, pb, cfg, 0); err != nil {
		t.Fatal(err)
	}
	// Everything sent has crossed the port by now (veth delivers inside
	// the sender's system call); the capture drains its socket and stops.
	close(finished)
	stop.Wait()
	if capErr != nil {
		t.Fatal(capErr)
	}
	st := c.stats()
	if err := sink.close(st.missed); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if os.Getenv("XAM_KEEP_CAPTURE") != "" {
		exec.Command("cp", path, os.Getenv("XAM_KEEP_CAPTURE")).Run()
	}
	if st.frames == 0 || st.missed != 0 {
		t.Fatalf("captured %d frames, missed %d", st.frames, st.missed)
	}

	out, err := exec.Command(tshark, "-X", "lua_script:"+script, "-r", path, "-T", "fields", "-E", "occurrence=a",
		"-e", "frame.number", "-e", "xam.cells", "-e", "xam.cell.hec_ok", "-e", "xam.ssam.kind", "-e", "xam.ssam.crc10_ok",
		"-e", "xam.aal5.crc_ok", "-e", "xam.tr.type", "-e", "xam.tr.src_epoch", "-e", "xam.am.class", "-e", "xam.am.handler",
		"-e", "_ws.malformed", "-e", "_ws.lua.text", "-e", "_ws.expert.severity", "-e", "xam.tr.crc10_ok").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != st.frames {
		t.Fatalf("tshark shows %d frames, the capture recorded %d:\n%s", len(lines), st.frames, out)
	}
	seen := map[string]int{}
	for _, line := range lines {
		fs := strings.Split(line, "\t")
		if len(fs) != 14 {
			t.Fatalf("line %q: %d fields", line, len(fs))
		}
		if fs[1] == "" {
			t.Errorf("frame %s: not decoded as xam", fs[0])
		}
		for i, name := range []string{"", "", "hec", "", "crc10", "aal5", "", "", "", "", "", "", "", "compact crc10"} {
			if name != "" && slices.Contains(strings.Split(fs[i], ","), "0") {
				t.Errorf("frame %s: a %s check failed: %q", fs[0], name, fs[i])
			}
		}
		if fs[10] != "" || fs[11] != "" || fs[12] != "" {
			t.Errorf("frame %s: malformed %q, lua %q, expert %q", fs[0], fs[10], fs[11], fs[12])
		}
		for i, what := range map[int]string{3: "ssam", 6: "transport", 8: "am", 4: "crc10", 5: "aal5", 13: "compact"} {
			if fs[i] != "" {
				seen[what]++
			}
		}
		if strings.Contains(fs[6], "1") && fs[7] == "" {
			t.Errorf("frame %s: a transport message without its epoch", fs[0])
		}
	}
	for _, what := range []string{"ssam", "transport", "am", "crc10", "aal5", "compact"} {
		if seen[what] == 0 {
			t.Errorf("no frame with %s fields (%v)", what, seen)
		}
	}
	// The text view: direction and layers, for a person.
	v, err := exec.Command(tshark, "-X", "lua_script:"+script, "-r", path, "-V").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	for _, want := range []string{"Direction: Inbound", "Direction: Outbound", "SSAM single-cell message", "Firmware transport: DATA",
		"Firmware transport, compact cell: DATA (compact)", "AM-II engine message (compact): AM-II request short"} {
		if !strings.Contains(string(v), want) {
			t.Errorf("tshark -V shows no %q", want)
		}
	}
	t.Logf("%d frames: %v", st.frames, seen)
}
