package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// TestWiresharkDissector captures live lab traffic of three kinds with
// `xam capture --format ether` on a switch port (SSAM single-cell and bulk
// messages, the firmware transport carrying AM-II's short messages in
// compact cells) and has tshark decode the file with tools/wireshark/xam.lua:
// every frame is xam's, every layer's fields are there, every HEC and CRC
// is correct, and nothing is malformed or raises a Lua error. SSAM's
// handler field shows as the session tag's high bits and the handler
// index, a request's whole tag and a sync's session with its tag, which
// must be the tag the docs derive from the session number and the tag that
// the session's requests and answers carry.
func TestWiresharkDissector(t *testing.T) {
	tshark, script := dissectorTools(t)
	l, c := switchCapture(t, "wsk", defaultCaptureBuffer)
	a, b := l.Hosts[0], l.Hosts[1]
	path, st := captureFile(t, c, l, "xam.pcapng", func() {
		pa := datapath.OnHost(a)
		pb := datapath.OnHost(b)
		cfg := bench.PingConfig{Count: 50, NoWarmup: true}
		if _, err := bench.SSAMPing(pa, pb, cfg, 0, ssam.Config{}); err != nil {
			t.Fatal(err)
		}
		if _, err := bench.SSAMBulk(pa, pb, 100_000, 4000, 0, ssam.Config{}); err != nil {
			t.Fatal(err)
		}
		if _, err := bench.AMIIPing(pa, pb, cfg, 0); err != nil { // 32 bytes: four arguments, compact cells in pairs
			t.Fatal(err)
		}
		cfg.Size = 16 // two arguments: compact cells
		if _, err := bench.AMIIPing(pa, pb, cfg, 0); err != nil {
			t.Fatal(err)
		}
		cfg.Size = 40 // five arguments: AAL5 PDUs
		if _, err := bench.AMIIPing(pa, pb, cfg, 0); err != nil {
			t.Fatal(err)
		}
		// Raw frames of one cell and of three: no protocol's, named so.
		for _, size := range []int{8, 100} {
			if _, err := bench.RawPing(pa, pb, bench.PingConfig{Count: 20, NoWarmup: true, Size: size}); err != nil {
				t.Fatal(err)
			}
		}
	})
	if st.frames == 0 || st.missed != 0 || st.pdus == 0 {
		t.Fatalf("captured %d frames, %d PDUs, missed %d", st.frames, st.pdus, st.missed)
	}

	rows := tsharkFields(t, tshark, script, path, st.frames,
		"frame.number", "xam.cells", "xam.cell.hec_ok", "xam.ssam.kind", "xam.ssam.crc10_ok",
		"xam.aal5.crc_ok", "xam.tr.type", "xam.tr.src_epoch", "xam.am.class", "xam.am.handler",
		"_ws.malformed", "_ws.lua.text", "_ws.expert.severity", "xam.tr.crc10_ok",
		"xam.ssam.index", "xam.ssam.tag", "xam.ssam.tag_hi", "xam.ssam.session", "xam.ssam.rejected",
		"xam.raw.seq")
	seen := map[string]int{}
	var msgs []ssamFields
	for _, fs := range rows {
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
		if fs[19] != "" && (fs[3] != "" || fs[5] != "" || fs[6] != "") {
			t.Errorf("frame %s: a raw frame shown as a protocol's: %q", fs[0], strings.Join(fs, "\t"))
		}
		for i, what := range map[int]string{3: "ssam", 6: "transport", 8: "am", 4: "crc10", 5: "aal5", 13: "compact", 19: "raw"} {
			if fs[i] != "" {
				seen[what]++
			}
		}
		if strings.Contains(fs[6], "1") && fs[7] == "" {
			t.Errorf("frame %s: a transport message without its epoch", fs[0])
		}
		ms, err := ssamMessages(fs[3], fs[14], fs[15], fs[16], fs[17], fs[18])
		if err != nil {
			t.Errorf("frame %s: SSAM fields: %v", fs[0], err)
		}
		msgs = append(msgs, ms...)
	}
	checkSSAMTags(t, msgs)
	// Each raw ping's request and echo, one frame each.
	if seen["raw"] != 2*2*20 {
		t.Errorf("%d raw frames decoded as such, want %d (%v)", seen["raw"], 2*2*20, seen)
	}
	for _, what := range []string{"ssam", "transport", "am", "crc10", "aal5", "compact", "raw"} {
		if seen[what] == 0 {
			t.Errorf("no frame with %s fields (%v)", what, seen)
		}
	}
	// The text view: direction and layers, for a person.
	v, err := exec.Command(tshark, "-X", "lua_script:"+script, "-r", path, "-V").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	for _, want := range []string{"Direction: Inbound", "Direction: Outbound", "SSAM single-cell message", "SSAM bulk message: request",
		"Session tag, high 16 bits: 0x", "Handler index: 0", "Session tag, low 7 bits: 0x", "[Session tag: 0x", "Session number: ", "Firmware transport: DATA",
		"Firmware transport, compact cell: DATA (compact)", "Type: DATA (compact, with an ACK) (7)", "DATA (compact, continued) ch ", "Acknowledged sequence: ", "AM-II engine message (compact): AM-II request short",
		"Raw frame on 0/40, 1 cells, no protocol", "Raw frame on 0/40, 3 cells, no protocol", "Sequence: 19"} {
		if !strings.Contains(string(v), want) {
			t.Errorf("tshark -V shows no %q", want)
		}
	}
	t.Logf("%d frames: %v", st.frames, seen)
}

// ssamFields is one SSAM message's fields as tshark shows them: kind,
// handler index, session tag, the tag's high 16 bits, session number and
// rejected (an ack's); what a kind lacks is -1.
type ssamFields struct {
	kind, index, tag, tagHi, session, rejected int64
}

// ssamMessages splits one frame's SSAM fields (tshark's values, comma
// separated, in the order of the messages) into its messages: every
// message has a kind and the tag's high bits; requests, replies and acks
// an index; requests and syncs a whole tag; syncs a session; acks the
// rejected flag.
func ssamMessages(kinds, indices, tags, tagHis, sessions, rejected string) ([]ssamFields, error) {
	list := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	cols := [][]string{list(indices), list(tags), list(tagHis), list(sessions), list(rejected)}
	var next [5]int
	take := func(col int, what string) (int64, error) {
		if next[col] >= len(cols[col]) {
			return 0, fmt.Errorf("a message without its %s", what)
		}
		v := cols[col][next[col]]
		next[col]++
		switch v {
		case "True":
			return 1, nil
		case "False":
			return 0, nil
		}
		return strconv.ParseInt(v, 0, 64)
	}
	var out []ssamFields
	for _, k := range list(kinds) {
		kind, err := strconv.Atoi(k)
		if err != nil {
			return nil, err
		}
		m := ssamFields{kind: int64(kind), index: -1, tag: -1, session: -1, rejected: -1}
		var errs [5]error
		if kind != 3 {
			m.index, errs[0] = take(0, "handler index")
		}
		if kind == 0 || kind == 3 {
			m.tag, errs[1] = take(1, "session tag")
		}
		m.tagHi, errs[2] = take(2, "tag's high bits")
		if kind == 3 {
			m.session, errs[3] = take(3, "session number")
		}
		if kind == 2 {
			m.rejected, errs[4] = take(4, "rejected flag")
		}
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("%s message: %w", k, err)
			}
		}
		out = append(out, m)
	}
	for i, c := range cols {
		if next[i] != len(c) {
			return nil, fmt.Errorf("%d values left over in %q for kinds %q", len(c)-next[i], c, kinds)
		}
	}
	return out, nil
}

// checkSSAMTags checks the SSAM messages of a capture: a sync's tag is the
// one docs/wire.md derives from its session number (the top 23 bits of
// session x 0x9E3779B1 modulo 2^32, 1 where they are 0), every request
// carries a synced session's whole tag and every answer its high 16 bits,
// a request's and a reply's handler index is one an endpoint can have, and
// an ack's index is 0 (rejected false) or 0xFFFF (rejected true).
func checkSSAMTags(t *testing.T, msgs []ssamFields) {
	t.Helper()
	tags, his := map[int64]bool{}, map[int64]bool{}
	for _, m := range msgs {
		if m.kind != 3 {
			continue
		}
		want := int64(uint32(m.session) * 0x9e3779b1 >> 9)
		if want == 0 {
			want = 1
		}
		if m.tag != want || m.tagHi != want>>7 {
			t.Errorf("sync of session %d: tag %#x, high bits %#x; want %#x", m.session, m.tag, m.tagHi, want)
		}
		tags[want], his[want>>7] = true, true
	}
	kinds := map[int64]int{}
	for _, m := range msgs {
		kinds[m.kind]++
		switch m.kind {
		case 0:
			if !tags[m.tag] || m.tag>>7 != m.tagHi {
				t.Errorf("request of tag %#x (high bits %#x): no sync of the session (synced tags %v)", m.tag, m.tagHi, tags)
			}
		case 1, 2:
			if !his[m.tagHi] {
				t.Errorf("answer of tag's high bits %#x: no sync of the session (synced tags %v)", m.tagHi, tags)
			}
		}
		switch {
		case m.kind == 2 && !(m.index == 0 && m.rejected == 0 || m.index == 0xffff && m.rejected == 1):
			t.Errorf("ack of handler index %d, rejected %d", m.index, m.rejected)
		case m.kind < 2 && (m.index < 0 || m.index >= ssam.MaxHandlers):
			t.Errorf("%d message of handler index %d", m.kind, m.index)
		}
	}
	t.Logf("%d SSAM messages by kind: %v; synced tags %v", len(msgs), kinds, tags)
	for k, name := range []string{"request", "reply", "ack", "sync"} {
		if kinds[int64(k)] == 0 {
			t.Errorf("no SSAM %s in the capture (%d messages by kind: %v)", name, len(msgs), kinds)
		}
	}
}

// TestWiresharkDissectorJumbo captures, on a switch port of MTU 65535,
// multi-buffer frames (each spans up to 17 UMEM chunks at its hosts): raw
// frames of 60000 bytes, GRIM's 48 KB bulk messages (one transport PDU of
// about 1000 cells a frame) and SSAM's 8 KB bulk. The capture keeps them
// whole, and tshark with tools/wireshark/xam.lua decodes every frame as
// xam's with every check correct and nothing malformed.
func TestWiresharkDissectorJumbo(t *testing.T) {
	tshark, script := dissectorTools(t)
	mtu := datapath.MaxMTU(true)
	l, c := switchCaptureMTU(t, "wsj", defaultCaptureBuffer, mtu)
	path, st := captureFile(t, c, l, "jumbo.pcapng", func() {
		pa, pb := datapath.OnHost(l.Hosts[0]), datapath.OnHost(l.Hosts[1])
		if _, err := bench.GRIMPing(pa, pb, bench.PingConfig{Count: 10, NoWarmup: true, Size: 48 << 10}, 0, false, bench.FirmwareLayout{}); err != nil {
			t.Fatal(err)
		}
		if _, err := bench.SSAMBulk(pa, pb, 100_000, 8192, 0, ssam.Config{}); err != nil {
			t.Fatal(err)
		}
		if _, err := bench.RawPing(pa, pb, bench.PingConfig{Count: 10, NoWarmup: true, Size: 58000}); err != nil {
			t.Fatal(err)
		}
	})
	if st.frames == 0 || st.missed != 0 {
		t.Fatalf("captured %d frames, missed %d", st.frames, st.missed)
	}
	rows := tsharkFields(t, tshark, script, path, st.frames,
		"frame.number", "frame.len", "frame.cap_len", "xam.cells", "xam.cell.hec_ok",
		"xam.aal5.crc_ok", "xam.ssam.crc10_ok", "_ws.malformed", "_ws.lua.text", "_ws.expert.severity",
		"xam.tr.type", "xam.raw.seq")
	big, transport, raw := 0, 0, 0
	for _, fs := range rows {
		n, _ := strconv.Atoi(fs[1])
		if fs[1] != fs[2] {
			t.Errorf("frame %s: %s bytes, %s captured", fs[0], fs[1], fs[2])
		}
		if fs[3] == "" {
			t.Errorf("frame %s (%d bytes): not decoded as xam", fs[0], n)
		}
		for i, name := range map[int]string{4: "hec", 5: "aal5", 6: "crc10"} {
			if slices.Contains(strings.Split(fs[i], ","), "0") {
				t.Errorf("frame %s (%d bytes): a %s check failed", fs[0], n, name)
			}
		}
		if fs[7] != "" || fs[8] != "" || fs[9] != "" {
			t.Errorf("frame %s: malformed %q, lua %q, expert %q", fs[0], fs[7], fs[8], fs[9])
		}
		if n > 4096 {
			big++
			if fs[10] != "" {
				transport++
			}
			if fs[11] != "" {
				raw++
			}
		}
	}
	if raw != 2*10 || transport < 10 {
		t.Errorf("frames past 4 KB: %d in all, %d raw (want %d), %d of the transport (want at least 10)", big, raw, 2*10, transport)
	}
	t.Logf("%d frames, %d past 4 KB", st.frames, big)
}

// TestWiresharkDissectorUDP: the dissector decodes xam's UDP form as
// captured on the router between two subnets: raw pings and GRIM over
// IPv4 and IPv6, every frame xam's with HECs and CRCs correct.
func TestWiresharkDissectorUDP(t *testing.T) {
	tshark, script := dissectorTools(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("wsu%d", os.Getpid()), Routed: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	var c *capturer
	if err := l.Router.Do(func() (err error) {
		c, err = openCaptureUDP(l.Router.Ports[0], cells.DefaultUDPPort, defaultCaptureBuffer)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close() })
	path, st := captureFile(t, c, l, "udp.pcapng", func() {
		for _, ipv6 := range []bool{false, true} {
			pa, pb := datapath.OnHost(l.Hosts[0]), datapath.OnHost(l.Hosts[1])
			pa.Encap = datapath.Encap{UDP: true, IPv6: ipv6}
			pb.Encap = pa.Encap
			if _, err := bench.RawPing(pa, pb, bench.PingConfig{Count: 10, NoWarmup: true, Size: 1000}); err != nil {
				t.Fatal(err)
			}
			if _, err := bench.GRIMPing(pa, pb, bench.PingConfig{Count: 10, NoWarmup: true, Size: 3000}, 0, false, bench.FirmwareLayout{}); err != nil {
				t.Fatal(err)
			}
		}
	})
	if st.frames == 0 || st.missed != 0 || st.bad != 0 {
		t.Fatalf("captured %d frames, missed %d, bad %d", st.frames, st.missed, st.bad)
	}
	rows := tsharkFields(t, tshark, script, path, st.frames,
		"frame.number", "ip.version", "ipv6.version", "udp.dstport", "xam.cells", "xam.cell.hec_ok",
		"xam.aal5.crc_ok", "_ws.malformed", "_ws.expert.severity", "xam.raw.seq")
	v4, v6, raw := 0, 0, 0
	for _, fs := range rows {
		if fs[3] != strconv.Itoa(int(cells.DefaultUDPPort)) || fs[4] == "" {
			t.Errorf("frame %s: UDP port %q, cells %q: not decoded as xam's UDP form", fs[0], fs[3], fs[4])
		}
		for i, name := range map[int]string{5: "hec", 6: "aal5"} {
			if slices.Contains(strings.Split(fs[i], ","), "0") {
				t.Errorf("frame %s: a %s check failed", fs[0], name)
			}
		}
		if fs[7] != "" || fs[8] != "" {
			t.Errorf("frame %s: malformed %q, expert %q", fs[0], fs[7], fs[8])
		}
		switch {
		case fs[1] == "4":
			v4++
		case fs[2] == "6":
			v6++
		}
		if fs[9] != "" {
			raw++
		}
	}
	if v4 == 0 || v6 == 0 || raw != 2*2*10 {
		t.Errorf("%d IPv4 frames, %d IPv6, %d raw pings (want %d)", v4, v6, raw, 2*2*10)
	}
	t.Logf("%d frames: %d over IPv4, %d over IPv6", st.frames, v4, v6)
}

// captureFile captures, with `xam capture --format ether`'s sink, what
// crosses the lab's first switch port while traffic runs, into a file
// name in a temporary directory (copied to $XAM_KEEP_CAPTURE if set), and
// returns its path and what the capture counted.
func captureFile(t *testing.T, c *capturer, l *lab.Lab, name string, traffic func()) (string, captureStats) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	port := ""
	if l.Switch != nil {
		port = l.Switch.Ports[0]
	} else {
		port = l.Router.Ports[0]
	}
	sink, err := newCaptureSink(f, "ether", port)
	if err != nil {
		t.Fatal(err)
	}
	var stop sync.WaitGroup
	var capErr error
	finished := make(chan struct{})
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
	traffic()
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
	if k := os.Getenv("XAM_KEEP_CAPTURE"); k != "" {
		exec.Command("cp", path, k).Run()
	}
	return path, st
}

// dissectorTools returns tshark's path and the dissector's, for a test
// that needs root (its lab) and tshark.
func dissectorTools(t *testing.T) (tshark, script string) {
	t.Helper()
	testenv.RequirePrivileged(t)
	tshark = testenv.RequireCommand(t, "tshark")
	script, err := filepath.Abs("../../tools/wireshark/xam.lua")
	if err != nil {
		t.Fatal(err)
	}
	return tshark, script
}

// tsharkFields has tshark decode the capture at path with the dissector
// and returns, for each of its frames (there must be frames of them), the
// values of fields, all occurrences of each comma-separated.
func tsharkFields(t *testing.T, tshark, script, path string, frames int, fields ...string) [][]string {
	t.Helper()
	args := []string{"-X", "lua_script:" + script, "-r", path, "-T", "fields", "-E", "occurrence=a"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != frames {
		t.Fatalf("tshark shows %d frames, the capture recorded %d:\n%s", len(lines), frames, out)
	}
	rows := make([][]string, len(lines))
	for i, line := range lines {
		if rows[i] = strings.Split(line, "\t"); len(rows[i]) != len(fields) {
			t.Fatalf("line %q: %d fields, want %d", line, len(rows[i]), len(fields))
		}
	}
	return rows
}

// TestWiresharkDissectorInterleaved: both hosts send on the same circuits,
// so a frame of one may come between the frames of the other's PDU (a
// RESET of the transport's handshake between the frames of a bulk
// chunk, say). The dissector reassembles each direction apart: host A's
// three-cell PDU, split over two frames with host B's one-cell PDU
// between them, decodes whole, its AAL5 CRC correct.
func TestWiresharkDissectorInterleaved(t *testing.T) {
	tshark, script := dissectorTools(t)
	seg, err := cells.NewSegmenter(cells.SAR{VPI: 0, VCI: 32})
	if err != nil {
		t.Fatal(err)
	}
	long, err := seg.Append(nil, make([]byte, 100)) // three cells
	if err != nil {
		t.Fatal(err)
	}
	short, err := seg.Append(nil, make([]byte, 20)) // one cell
	if err != nil {
		t.Fatal(err)
	}
	macA, macB := []byte{2, 0, 0, 0, 0, 0xa}, []byte{2, 0, 0, 0, 0, 0xb}
	aToB := cells.Framer{Dst: macB, Src: macA}
	bToA := cells.Framer{Dst: macA, Src: macB}
	frame := func(f cells.Framer, cs []byte, start bool) []byte {
		b, err := f.Append(nil, cs)
		if err != nil {
			t.Fatal(err)
		}
		if start {
			b[cells.EthernetHeaderSize+1] |= cells.FlagStart
		}
		return b
	}
	path := writeFrames(t, "interleaved.pcapng", [][]byte{
		frame(aToB, long[:2*cells.CellSize], true),
		frame(bToA, short, true),
		frame(aToB, long[2*cells.CellSize:], false),
	})
	rows := tsharkFields(t, tshark, script, path, 3, "frame.number", "xam.aal5.crc_ok", "_ws.expert.severity")
	for _, fs := range rows {
		if slices.Contains(strings.Split(fs[1], ","), "0") || fs[2] != "" {
			t.Errorf("frame %s: AAL5 CRC correct %q, expert %q", fs[0], fs[1], fs[2])
		}
	}
	if rows[2][1] != "1" {
		t.Errorf("frame 3 closes A's PDU: AAL5 CRC correct %q, want 1", rows[2][1])
	}
}

// TestWiresharkDissectorCompactCells: the three compact cells of
// docs/wire.md, built from the document's tables (a compact ACK cell, as
// a receiver flushes alone, with two entries; a compact DATA cell; one
// with an acknowledgement, its length in the trailer), decode with their
// fields and CRC-10s correct, and a DATA cell with an acknowledgement
// whose length bits were changed is not taken for one.
func TestWiresharkDissectorCompactCells(t *testing.T) {
	tshark, script := dissectorTools(t)
	cell := func(body func(b []byte)) []byte {
		c := cells.Cell(make([]byte, cells.CellSize))
		if err := c.Encode(cells.UNI, cells.Fields{VCI: 33, PTI: cells.PTIEndOfMessage}); err != nil {
			t.Fatal(err)
		}
		body(c.Payload())
		return c
	}
	epochs := func(b []byte) {
		binary.BigEndian.PutUint32(b, 0x11111111)
		binary.BigEndian.PutUint32(b[4:], 0x22222222)
	}
	ack := cell(func(b []byte) {
		b[0], b[1] = 6, 1 // compact ACK, channel 1
		binary.BigEndian.PutUint16(b[2:], 7)
		epochs(b[6:])
		b[14] = 2
		b[15], b[18] = 2, 3 // entries: channels 2 and 3
		binary.BigEndian.PutUint16(b[16:], 8)
		binary.BigEndian.PutUint16(b[19:], 9)
		binary.BigEndian.PutUint16(b[46:], cells.CRC10(b[:46]))
	})
	data := cell(func(b []byte) {
		b[0], b[1] = 5, 0
		binary.BigEndian.PutUint16(b[2:], 4)
		epochs(b[6:])
		b[14] = 4
		copy(b[15:], "ping")
		binary.BigEndian.PutUint16(b[46:], cells.CRC10(b[:46]))
	})
	acked := func(length uint8) []byte {
		return cell(func(b []byte) {
			b[0], b[1] = 7, 0
			binary.BigEndian.PutUint16(b[2:], 5)
			b[4] = 1
			binary.BigEndian.PutUint16(b[5:], 6)
			epochs(b[7:])
			copy(b[15:], "pong")
			binary.BigEndian.PutUint16(b[46:], uint16(length)<<10|cells.CRC10Trailer(b[:46], 4))
		})
	}
	// A message of 40 bytes: a compact DATA cell with its first 31, and
	// the continuation cell with the other 9, in one frame.
	first := cell(func(b []byte) {
		b[0], b[1] = 5, 1
		binary.BigEndian.PutUint16(b[2:], 9)
		epochs(b[6:])
		b[14] = 40
		copy(b[15:46], strings.Repeat("x", 31))
		binary.BigEndian.PutUint16(b[46:], cells.CRC10(b[:46]))
	})
	more := cell(func(b []byte) {
		b[0], b[1] = 8, 1
		binary.BigEndian.PutUint16(b[2:], 9)
		copy(b[4:], "123456789")
		binary.BigEndian.PutUint16(b[46:], cells.CRC10(b[:46]))
	})
	macA, macB := []byte{2, 0, 0, 0, 0, 0xa}, []byte{2, 0, 0, 0, 0, 0xb}
	fr := cells.Framer{Dst: macB, Src: macA}
	var frames [][]byte
	for _, c := range [][]byte{ack, data, acked(4), acked(5), append(first, more...)} {
		f, err := fr.Append(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		f[cells.EthernetHeaderSize+1] |= cells.FlagStart
		frames = append(frames, f)
	}
	path := writeFrames(t, "compact.pcapng", frames)
	rows := tsharkFields(t, tshark, script, path, 5, "frame.number", "xam.tr.type", "xam.tr.crc10_ok",
		"xam.tr.ack.channel", "xam.tr.ack.seq", "xam.tr.src_epoch", "xam.tr.dst_epoch", "_ws.expert.severity", "_ws.lua.text")
	want := [][]string{
		{"1", "6", "1", "2,3", "8,9", "0x11111111", "0x22222222", "", ""},
		{"2", "5", "1", "", "", "0x11111111", "0x22222222", "", ""},
		{"3", "7", "1", "1", "6", "0x11111111", "0x22222222", "", ""},
	}
	for i, w := range want {
		if !slices.Equal(rows[i], w) {
			t.Errorf("frame %d: fields %q, want %q", i+1, rows[i], w)
		}
	}
	if rows[3][1] != "" {
		t.Errorf("frame 4, its length changed under the CRC: decoded as transport type %q", rows[3][1])
	}
	if w := []string{"5", "5,8", "1,1"}; !slices.Equal(rows[4][:3], w) {
		t.Errorf("frame 5, a compact message of two cells: fields %q, want %q first", rows[4], w)
	}
}

// writeFrames writes frames, a microsecond apart, into a capture file of
// that name in the test's directory, and returns its path.
func writeFrames(t *testing.T, name string, frames [][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cells.NewFrameWriter(file, "veth0")
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1_700_000_000, 0)
	for i, f := range frames {
		if err := w.WriteFrame(ts.Add(time.Duration(i)*time.Microsecond), f, cells.DirectionUnknown); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ts.Add(time.Millisecond), 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
