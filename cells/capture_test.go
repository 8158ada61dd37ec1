package cells

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/pcapgo"
	"github.com/xam-project/xam/internal/testenv"
)

// writeTestCapture records the cells of three PDUs on two circuits, and the
// PDUs as reassembled, plus one PDU with a damaged CRC.
// It returns the capture's path and, per record, "type,VPI,VCI" as tshark
// should show it.
func writeTestCapture(t *testing.T) (path string, records []string) {
	var pdus []VC
	t.Helper()
	var buf bytes.Buffer
	cw, err := NewCaptureWriter(&buf, UNI)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 250_000_000)
	r := NewReassembler(ReassemblerConfig{})
	for _, p := range []struct {
		sar SAR
		sdu []byte
	}{
		{SAR{VPI: 1, VCI: 42}, []byte("hello xam")},
		{SAR{VPI: 7, VCI: 1000, GFC: 2, CLP: true}, bytes.Repeat([]byte("cells!"), 30)},
		{SAR{VPI: 255, VCI: 65535}, make([]byte, 3000)},
	} {
		cs := mustSegment(t, p.sar, p.sdu)
		if err := cw.WriteCells(ts, cs); err != nil {
			t.Fatal(err)
		}
		for range len(cs) / CellSize {
			records = append(records, fmt.Sprintf("3,%d,%d", p.sar.VPI, p.sar.VCI))
		}
		for o := 0; o < len(cs); o += CellSize {
			pdu, ok, err := r.Push(Cell(cs[o : o+CellSize]))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				pdus = append(pdus, pdu.VC)
				records = append(records, fmt.Sprintf("4,%d,%d", pdu.VC.VPI, pdu.VC.VCI))
				if err := cw.WritePDU(ts, pdu.VC, pdu.CPCS); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	bad := mustSegment(t, SAR{VPI: 1, VCI: 43}, []byte("bad crc"))
	Cell(bad).Payload()[PayloadSize-1] ^= 0xff
	if err := cw.WritePDU(ts, VC{1, 43}, Cell(bad).Payload()); err != nil {
		t.Fatal(err)
	}
	records = append(records, "4,1,43")
	if err := cw.WritePDU(ts, VC{1, 1}, make([]byte, MaxCapturePDU+PayloadSize)); !errors.Is(err, ErrCaptureTooLong) {
		t.Errorf("oversize PDU: %v, want ErrCaptureTooLong", err)
	}
	if err := cw.WritePDU(ts, VC{1, 1}, make([]byte, 47)); err == nil {
		t.Error("a 47-byte CPCS-PDU was recorded")
	}
	path = filepath.Join(t.TempDir(), "cells.pcap")
	if len(pdus) != 3 {
		t.Fatalf("reassembled %d PDUs, want 3", len(pdus))
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, records
}

func TestCaptureRecords(t *testing.T) {
	path, want := writeTestCapture(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := pcapgo.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if rd.LinkType() != LinkTypeERF {
		t.Fatalf("link type %v, want ERF", rd.LinkType())
	}
	var recs [][]byte
	var cis []gopacket.CaptureInfo
	for {
		rec, ci, err := rd.ReadPacketData()
		if err != nil {
			break
		}
		recs = append(recs, rec)
		cis = append(cis, ci)
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	first := recs[0]
	// ERF header: LE timestamp (32.32), type 3, flags varlen, rlen, lctr, wlen.
	if ts := uint64(first[0]) | uint64(first[1])<<8 | uint64(first[2])<<16 | uint64(first[3])<<24 |
		uint64(first[4])<<32 | uint64(first[5])<<40 | uint64(first[6])<<48 | uint64(first[7])<<56; ts>>32 != 1700000000 || ts&0xffffffff != 1<<30 {
		t.Errorf("timestamp %#x", ts)
	}
	if first[8] != 3 || first[9] != 0x04 || int(first[10])<<8|int(first[11]) != 68 || int(first[14])<<8|int(first[15]) != 52 {
		t.Errorf("cell record header % x", first[:16])
	}
	if !bytes.Equal(first[16:20], []byte{0x00, 0x10, 0x02, 0xa2}) {
		t.Errorf("ATM header % x, want 00 10 02 a2", first[16:20])
	}
	if !cis[0].Timestamp.Equal(time.Unix(1700000000, 250_000_000)) {
		t.Errorf("pcap timestamp %v", cis[0].Timestamp)
	}
	if pdu := recs[1]; pdu[8] != 4 || len(pdu) != 16+4+48 {
		t.Errorf("AAL5 record: type %d, %d bytes", pdu[8], len(pdu))
	}
}

// TestCaptureWireshark opens the capture with tshark: every cell shows its
// VPI/VCI, and each AAL5 record's CRC is reported correct except the one
// damaged on purpose.
func TestCaptureWireshark(t *testing.T) {
	tshark := testenv.RequireCommand(t, "tshark")
	path, want := writeTestCapture(t)
	run := func(args ...string) string {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(tshark, append([]string{"-r", path}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tshark %v: %v\n%s", args, err, stderr.Bytes())
		}
		return string(out)
	}

	out := run("-T", "fields", "-E", "separator=,", "-e", "erf.types.type", "-e", "atm.vpi", "-e", "atm.vci")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("tshark shows %d records, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("record %d: tshark shows %q, want %q", i+1, lines[i], w)
		}
	}

	out = run("-o", "erf.aal5_type:Unspecified", "-V")
	var verdicts []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "AAL5 CRC:") {
			verdicts = append(verdicts, strings.TrimSpace(l))
		}
	}
	if len(verdicts) != 4 {
		t.Fatalf("tshark shows %d AAL5 CRC lines, want 4:\n%s", len(verdicts), strings.Join(verdicts, "\n"))
	}
	for i, v := range verdicts {
		wantOK := i < 3
		if got := strings.HasSuffix(v, "(correct)"); got != wantOK {
			t.Errorf("AAL5 PDU %d: %q, want correct=%v", i+1, v, wantOK)
		}
	}
}
