package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpFlag matches a flag in what -h prints (flag.PrintDefaults).
var helpFlag = regexp.MustCompile(`(?m)^  -(\S+)`)

// TestManPages: xam man writes xam(1) and a page per command xam help
// lists, no more; each page has every flag, and every form of the usage,
// that `xam COMMAND -h` (and each subcommand's -h) prints.
func TestManPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	if code, _, errs := xam(t, nil, "man", "--dir", dir); code != 0 {
		t.Fatalf("xam man: exit %d: %s", code, errs)
	}
	want := []string{"xam.1"}
	_, help, _ := xam(t, nil, "help")
	for _, c := range commands {
		if c.hidden {
			if strings.Contains(help, "  "+c.name+" ") {
				t.Errorf("xam help lists the hidden command %s", c.name)
			}
			continue
		}
		want = append(want, "xam-"+c.name+".1")
		page := readPage(t, filepath.Join(dir, "xam-"+c.name+".1"))
		if !strings.HasPrefix(page, ".TH XAM"+roffEscape("-"+strings.ToUpper(c.name))+" 1 ") ||
			!strings.Contains(page, "\n.SH NAME\nxam"+roffEscape("-"+c.name+" - "+c.summary)+"\n") {
			t.Errorf("xam-%s.1: no title or NAME line:\n%s", c.name, page)
		}
		invocations := [][]string{{c.name, "-h"}}
		for _, s := range c.subs {
			invocations = append(invocations, []string{c.name, s, "-h"})
		}
		flags := 0
		for _, args := range invocations {
			code, out, errs := xam(t, nil, args...)
			if code != 0 {
				t.Errorf("xam %s: exit %d: %s", strings.Join(args, " "), code, errs)
			}
			found := helpFlag.FindAllStringSubmatch(out, -1)
			for _, m := range found {
				if f := `\fB` + roffEscape("--"+m[1]) + `\fR`; !strings.Contains(page, f) {
					t.Errorf("xam-%s.1 lacks %s, which xam %s prints", c.name, f, strings.Join(args, " "))
				}
			}
			flags += len(found)
			if len(found) == 0 {
				continue // xam lab -h: a line of its own; the subcommands' forms are the synopsis
			}
			usage, _, _ := strings.Cut(out, "\n  -")
			for _, form := range usageLines(strings.TrimPrefix(usage, "usage: xam ")) {
				syn, _, _ := strings.Cut(form, "   ")
				rest := roffEscape(strings.TrimPrefix(syn, "xam "+c.name))
				if !strings.Contains(page, rest) {
					t.Errorf("xam-%s.1's synopsis lacks %q (from xam %s)", c.name, syn, strings.Join(args, " "))
				}
			}
		}
		if flags == 0 {
			t.Errorf("xam %s -h prints no flags: the page's options cannot be checked", c.name)
		}
		main := readPage(t, filepath.Join(dir, "xam.1"))
		if !strings.Contains(main, ".BR xam"+roffEscape("-"+c.name)+" (1)\n") {
			t.Errorf("xam.1 does not list xam-%s(1)", c.name)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("pages %v; want %v", got, want)
	}
	if code, _, errs := xam(t, nil, "man"); code != 2 || !strings.Contains(errs, "--dir is required") {
		t.Errorf("xam man without --dir: exit %d, %q; want 2", code, errs)
	}
}

// TestRoffText: text that would read as a roff request or escape is
// escaped.
func TestRoffText(t *testing.T) {
	for in, want := range map[string]string{
		`a\b`:           `a\eb`,
		"--dev":         `\-\-dev`,
		".x\n'y\nz":     "\\&.x\n.br\n\\&'y\n.br\nz",
		"plain words 1": "plain words 1",
	} {
		if got := roffText(in); got != want {
			t.Errorf("roffText(%q) = %q; want %q", in, got, want)
		}
	}
}

func readPage(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
