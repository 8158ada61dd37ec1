package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/xam-project/xam/cells"
)

func runCells(e *env, args []string) error {
	if len(args) == 0 {
		return usageError("want a subcommand: segment, reassemble or demo")
	}
	switch args[0] {
	case "segment":
		return runSegment(e, args[1:])
	case "reassemble":
		return runReassemble(e, args[1:])
	case "demo":
		return runCellsDemo(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(e.stdout, "usage: xam cells segment|reassemble|demo [options]   (-h on each for options)")
		return nil
	}
	return usageError("unknown subcommand %q (want segment, reassemble or demo)", args[0])
}

func runSegment(e *env, args []string) error {
	fs := newFlags(e, "cells segment", "cells segment --vpi N --vci N [--uu N] [--hex] [--erf FILE] < SDU > CELLS")
	vpi := fs.Uint("vpi", 0, "virtual path identifier (0..255 UNI, 0..4095 NNI)")
	vci := fs.Uint("vci", 0, "virtual channel identifier (0..65535)")
	uu := fs.Uint("uu", 0, "CPCS user-to-user byte (0..255)")
	gfc := fs.Uint("gfc", 0, "generic flow control (0..15, UNI only)")
	clp := fs.Bool("clp", false, "set the cell loss priority bit on every cell")
	nni := fs.Bool("nni", false, "use the NNI header layout (12-bit VPI, no GFC)")
	hexOut := fs.Bool("hex", false, "write one cell per line as 106 lowercase hex digits")
	erf := fs.String("erf", "", "also write the cells and the PDU to this pcap file (ERF, for Wireshark)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !seen(fs, "vpi") || !seen(fs, "vci") {
		return usageError("--vpi and --vci are required")
	}
	format := cells.UNI
	if *nni {
		format = cells.NNI
	}
	if *vpi > cells.MaxVPINNI || *vci > cells.MaxVCI || *uu > 0xff || *gfc > cells.MaxGFC {
		return usageError("a field is out of range (vpi %d, vci %d, uu %d, gfc %d)", *vpi, *vci, *uu, *gfc)
	}
	g, err := cells.NewSegmenter(cells.SAR{
		Format: format, VPI: uint16(*vpi), VCI: uint16(*vci), GFC: uint8(*gfc), CLP: *clp, UU: uint8(*uu),
	})
	if err != nil {
		return fmt.Errorf("%v%w", err, errUsage)
	}
	sdu, err := io.ReadAll(io.LimitReader(e.stdin, cells.MaxSDU+1))
	if err != nil {
		return fmt.Errorf("reading the SDU: %w", err)
	}
	out, err := g.Append(nil, sdu)
	if err != nil {
		return err
	}
	if *erf != "" {
		if err := writeCapture(*erf, format, out); err != nil {
			return err
		}
	}
	w := bufio.NewWriter(e.stdout)
	if *hexOut {
		line := make([]byte, 2*cells.CellSize+1)
		line[len(line)-1] = '\n'
		for o := 0; o < len(out); o += cells.CellSize {
			hex.Encode(line, out[o:o+cells.CellSize])
			w.Write(line)
		}
	} else {
		w.Write(out)
	}
	return w.Flush()
}

// writeCapture records the cells and the PDUs they carry to an ERF pcap.
func writeCapture(path string, format cells.Format, out []byte) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("capture: %w", cerr)
		}
	}()
	cw, err := cells.NewCaptureWriter(f, format)
	if err != nil {
		return err
	}
	now := time.Now()
	r := cells.NewReassembler(cells.ReassemblerConfig{Format: format})
	for o := 0; o < len(out); o += cells.CellSize {
		c := cells.Cell(out[o : o+cells.CellSize])
		if err := cw.WriteCell(now, c); err != nil {
			return err
		}
		pdu, ok, err := r.Push(c)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		if ok {
			if err := cw.WritePDU(now, pdu.VC, pdu.CPCS); err != nil {
				return err
			}
		}
	}
	return nil
}

func runReassemble(e *env, args []string) error {
	fs := newFlags(e, "cells reassemble", "cells reassemble [--hex] [--nni] < CELLS > SDU")
	hexIn := fs.Bool("hex", false, "read one cell per line as 106 hex digits")
	nni := fs.Bool("nni", false, "cells use the NNI header layout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format := cells.UNI
	if *nni {
		format = cells.NNI
	}
	var next func() ([]byte, error)
	if *hexIn {
		next = hexCells(e.stdin)
	} else {
		next = binaryCells(e.stdin)
	}
	r := cells.NewReassembler(cells.ReassemblerConfig{Format: format})
	w := bufio.NewWriter(e.stdout)
	defer w.Flush()
	n, pdus := 0, 0
	for {
		c, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n++
		before := r.Stats().HEC.Corrected
		pdu, ok, err := r.Push(cells.Cell(c))
		if r.Stats().HEC.Corrected != before {
			fmt.Fprintf(e.stderr, "xam cells reassemble: cell %d: corrected a single-bit header error (HEC)\n", n)
		}
		if err != nil {
			w.Flush()
			return fmt.Errorf("cell %d: %w", n, err)
		}
		if ok {
			pdus++
			w.Write(pdu.SDU)
		}
	}
	if vcs := r.Pending(); len(vcs) > 0 {
		w.Flush()
		return fmt.Errorf("input ended inside a PDU on VC %v: %w (no end-of-message cell)", vcs[0], cells.ErrLostCells)
	}
	if n == 0 {
		return errors.New("no cells on input")
	}
	return w.Flush()
}

// binaryCells reads whole 53-byte cells.
func binaryCells(r io.Reader) func() ([]byte, error) {
	br := bufio.NewReader(r)
	buf := make([]byte, cells.CellSize)
	n := 0
	return func() ([]byte, error) {
		k, err := io.ReadFull(br, buf)
		switch {
		case err == io.EOF:
			return nil, io.EOF
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("cell %d: %w: input ends after %d of %d bytes", n+1, cells.ErrShortCell, k, cells.CellSize)
		case err != nil:
			return nil, err
		}
		n++
		return buf, nil
	}
}

// hexCells reads one cell per line as hex digits; blank lines and lines
// starting with # are skipped.
func hexCells(r io.Reader) func() ([]byte, error) {
	sc := bufio.NewScanner(r)
	buf := make([]byte, cells.CellSize)
	line := 0
	return func() ([]byte, error) {
		for sc.Scan() {
			line++
			s := strings.TrimSpace(sc.Text())
			if s == "" || s[0] == '#' {
				continue
			}
			s = strings.ReplaceAll(s, " ", "")
			if len(s) != 2*cells.CellSize {
				return nil, fmt.Errorf("line %d: %w: %d hex digits, want %d", line, cells.ErrShortCell, len(s), 2*cells.CellSize)
			}
			if _, err := hex.Decode(buf, []byte(s)); err != nil {
				return nil, fmt.Errorf("line %d: not hex: %w", line, err)
			}
			return buf, nil
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
}

// seen reports whether the flag was given on the command line.
func seen(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}
