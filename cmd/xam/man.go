package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// The manual pages are written from what `xam COMMAND -h` prints: each
// command's usage string and flag set, taken from the command itself (the
// env's help hook), so a page cannot drift from the command's help.

// helpText is a command's help: its usage string and its flags.
type helpText struct {
	usage string
	fs    *flag.FlagSet
}

// helpOf runs `xam ARGS... -h` in-process and returns the usage and flag
// set the command declared; ok is false for a command that prints its own
// help without a flag set (xam lab -h).
func helpOf(args ...string) (h helpText, ok bool) {
	var out bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &out,
		help: func(fs *flag.FlagSet, usage string) { h, ok = helpText{usage, fs}, true }}
	run(e, append(slices.Clone(args), "-h"))
	return h, ok
}

func runMan(e *env, args []string) error {
	fs := newFlags(e, "man", "man --dir DIR   (writes xam.1 and xam-COMMAND.1 for every command)")
	dir := fs.String("dir", "", "the directory to write the pages into (created if missing)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageError("--dir is required")
	}
	pages, err := manPages(readVersion().Version)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range pages {
			if !yield(n) {
				return
			}
		}
	}) {
		if err := os.WriteFile(filepath.Join(*dir, name), pages[name], 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "wrote %d manual pages into %s\n", len(pages), *dir)
	return nil
}

// manPages returns the pages by file name: xam.1 and xam-COMMAND.1 for
// each command xam help lists.
func manPages(version string) (map[string][]byte, error) {
	pages := map[string][]byte{"xam.1": mainPage(version)}
	for _, c := range commands {
		if c.hidden {
			continue
		}
		p, err := commandPage(c, version)
		if err != nil {
			return nil, err
		}
		pages["xam-"+c.name+".1"] = p
	}
	return pages, nil
}

// mainPage is xam(1): what xam is, its commands and their pages.
func mainPage(version string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, ".TH XAM 1 \"\" \"xam %s\" \"xam manual\"\n", roffEscape(version))
	fmt.Fprintf(&b, ".SH NAME\nxam \\- %s\n", roffEscape(tagline))
	b.WriteString(".SH SYNOPSIS\n\\fBxam\\fR \\fICOMMAND\\fR [\\fIoptions\\fR]\n.br\n\\fBxam help\\fR [\\fICOMMAND\\fR]\n.br\n\\fBxam \\-\\-version\\fR\n")
	b.WriteString(".SH DESCRIPTION\n" + roffText("xam rebuilds four classic user-level networking systems (SSAM, AM-II, DVCM and GRIM) "+
		"on AF_XDP sockets fed by an XDP program, with ATM cells and AAL5 carried in Ethernet frames and a firmware engine "+
		"run inline or as the xam fw daemon. Each command prints its options with -h (or xam help COMMAND); its manual page lists the same.") + "\n")
	b.WriteString(".SH COMMANDS\n")
	var see []string
	for _, c := range commands {
		if c.hidden {
			continue
		}
		fmt.Fprintf(&b, ".TP\n.BR xam\\-%s (1)\n%s\n", roffEscape(c.name), roffText(c.summary))
		see = append(see, fmt.Sprintf(".BR xam\\-%s (1)", roffEscape(c.name)))
	}
	fmt.Fprintf(&b, ".SH EXIT STATUS\n%s\n", roffText(fmt.Sprintf(
		"0 on success, 1 when the command failed, 2 for a usage error (a bad flag or argument), %d when interrupted by a signal.", exitInterrupted)))
	b.WriteString(".SH FILES\n")
	for _, f := range [][2]string{
		{"/run/xam/fw.sock", "the firmware daemon's unix socket (xam fw --socket)"},
		{"/run/xam/job-JOBID.sock", "the socket of a Slurm job's firmware daemon (xam fw --job)"},
		{"/run/xam/labs", "which process owns each lab (xam lab list)"},
		{"/etc/default/xam-fw", "the xam fw systemd unit's options (XAM_FW_ARGS)"},
	} {
		fmt.Fprintf(&b, ".TP\n.I %s\n%s\n", roffEscape(f[0]), roffText(f[1]))
	}
	fmt.Fprintf(&b, ".SH SEE ALSO\n%s\n", strings.Join(see, ",\n"))
	return b.Bytes()
}

// commandPage is xam-NAME(1): the command's usage, its flags, and each
// subcommand's usage and flags.
func commandPage(c command, version string) ([]byte, error) {
	own, ok := helpOf(c.name)
	if !ok && len(c.subs) == 0 {
		return nil, fmt.Errorf("xam %s -h declares no flag set", c.name)
	}
	parts := []helpText{}
	if ok {
		parts = append(parts, own)
	}
	for _, s := range c.subs {
		h, ok := helpOf(c.name, s)
		if !ok {
			return nil, fmt.Errorf("xam %s %s -h declares no flag set", c.name, s)
		}
		parts = append(parts, h)
	}
	var synopsis, notes []string
	for _, h := range parts {
		for _, l := range usageLines(h.usage) {
			syn, note, _ := strings.Cut(l, "   ")
			if !slices.Contains(synopsis, syn) {
				synopsis = append(synopsis, syn)
			}
			if note = strings.TrimSpace(note); note != "" && !slices.Contains(notes, note) {
				notes = append(notes, note)
			}
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, ".TH XAM\\-%s 1 \"\" \"xam %s\" \"xam manual\"\n", roffEscape(strings.ToUpper(c.name)), roffEscape(version))
	fmt.Fprintf(&b, ".SH NAME\nxam\\-%s \\- %s\n.SH SYNOPSIS\n", roffEscape(c.name), roffEscape(c.summary))
	for i, l := range synopsis {
		if i > 0 {
			b.WriteString(".br\n")
		}
		b.WriteString(synopsisLine(c.name, l))
	}
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", roffText("xam "+c.name+": "+c.summary+"."))
	for _, n := range notes {
		fmt.Fprintf(&b, ".PP\n%s\n", roffText(n))
	}
	for i, h := range parts {
		switch {
		case ok && i == 0:
			b.WriteString(".SH OPTIONS\n")
		default:
			fmt.Fprintf(&b, ".SH %s\n", roffEscape(strings.ToUpper("options of xam "+h.fs.Name())))
		}
		writeFlags(&b, h.fs)
	}
	fmt.Fprintf(&b, ".SH SEE ALSO\n.BR xam (1)\n")
	return b.Bytes(), nil
}

// usageLines splits a usage string into its forms, each starting "xam ":
// the first line is one (without "xam "), and so is each later line that
// starts with "xam "; any other line continues the form above it.
func usageLines(usage string) []string {
	var lines []string
	for i, l := range strings.Split(usage, "\n") {
		switch l = strings.TrimSpace(l); {
		case l == "":
		case i == 0:
			lines = append(lines, "xam "+l)
		case strings.HasPrefix(l, "xam ") || len(lines) == 0:
			lines = append(lines, l)
		default:
			lines[len(lines)-1] += " " + l
		}
	}
	return lines
}

// synopsisLine sets "xam NAME" in bold and the rest as written.
func synopsisLine(name, l string) string {
	head := "xam " + name
	rest, found := strings.CutPrefix(l, head)
	if !found {
		return roffText(l) + "\n"
	}
	return fmt.Sprintf("\\fB%s\\fR%s\n", roffEscape(head), roffEscape(rest))
}

// writeFlags lists a flag set's flags as -h does (flag.PrintDefaults): the
// name, the argument's type, the usage and the default when it is not the
// zero value.
func writeFlags(b *bytes.Buffer, fs *flag.FlagSet) {
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		arg, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(b, ".TP\n\\fB\\-\\-%s\\fR", roffEscape(f.Name))
		if arg != "" {
			fmt.Fprintf(b, " \\fI%s\\fR", roffEscape(arg))
		}
		if !isZeroDefault(f) {
			if g, ok := f.Value.(flag.Getter); ok && isString(g.Get()) {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		fmt.Fprintf(b, "\n%s\n", roffText(usage))
	})
	if n == 0 {
		b.WriteString("None.\n")
	}
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// isZeroDefault reports whether f's default is its type's zero value, as
// the flag package decides when it leaves "(default ...)" out.
func isZeroDefault(f *flag.Flag) (zero bool) {
	defer func() {
		if recover() != nil {
			zero = f.DefValue == ""
		}
	}()
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	if v, ok := z.Interface().(flag.Value); ok {
		return f.DefValue == v.String()
	}
	return f.DefValue == ""
}

// roffEscape escapes text for roff: backslashes, and hyphens as the
// minus signs a reader copies into a command line.
func roffEscape(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}

// roffText escapes text that may span lines: each line is one line of
// the page, none read as a request.
func roffText(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		l = roffEscape(l)
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n.br\n")
}
