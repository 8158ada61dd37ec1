package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
)

// TestFwModuleHelp: `xam fw -h` lists the flags that the coordination
// module registered with its kind (nicfw.RegisterModule), and --module's
// help and the usage line name the module, though fw.go names no module.
func TestFwModuleHelp(t *testing.T) {
	code, out, errs := xam(t, nil, "fw", "-h")
	if code != 0 || errs != "" {
		t.Fatalf("fw -h: exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"[--module coord [--coord-threshold B] [--coord-early B] [--coord-link-rate RATE --coord-port-buffer B]]\n",
		"extension modules to load, comma-separated: coord (sender coordination)",
		fmt.Sprintf("-coord-threshold int\n    \tcoord: messages of at most this many bytes are not coordinated (default %d)", coord.DefaultThreshold),
		"-coord-early int\n    \tcoord: pass the token on when this many bytes of the message are left (Early Token Release)",
		"-coord-link-rate string\n    \tcoord: the switch ports' rate, e.g. 100mbit or 1gbit",
		"-coord-port-buffer string\n    \tcoord: the bytes a switch port queues, e.g. 16k",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("fw -h lacks %q:\n%s", want, out)
		}
	}
}

// TestFwModuleRegistry: a kind of module that `xam fw` is given (as
// registered kinds are) has its flags declared and listed, is loaded by
// name with them, and its errors are usage errors; its flags without
// --module NAME, and an unknown name, are refused, naming the kinds.
func TestFwModuleRegistry(t *testing.T) {
	fake := nicfw.ModuleKind{Name: "fake", Help: "a test's", Usage: "[--fake-n N]", Flags: func(fs *flag.FlagSet) func() (nicfw.Module, error) {
		n := fs.Int("fake-n", 1, "fake: a number, at least 1")
		return func() (nicfw.Module, error) {
			if *n < 1 {
				return nil, fmt.Errorf("--fake-n %d: want at least 1", *n)
			}
			return coord.New(coord.Config{Threshold: *n}), nil
		}
	}}
	kinds := append(nicfw.ModuleKinds(), fake)
	// load declares kinds' flags, parses args and loads the modules that
	// names lists.
	load := func(names string, args ...string) (*flag.FlagSet, []fwModule, error) {
		fs := flag.NewFlagSet("fw", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		mf := declareModules(fs, kinds)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		mods, err := mf.load(names)
		return fs, mods, err
	}

	fs, mods, err := load("fake,coord", "--fake-n", "5")
	if err != nil {
		t.Fatal(err)
	}
	if f := fs.Lookup("fake-n"); f == nil || f.Usage != "fake: a number, at least 1" {
		t.Errorf("--fake-n declared as %+v", f)
	}
	if len(mods) != 2 || mods[0].kind.Name != "fake" || mods[1].kind.Name != "coord" {
		t.Fatalf("loaded %v, want fake then coord", mods)
	}
	if c := mods[0].mod.(*coord.Module).Config(); c.Threshold != 5 {
		t.Errorf("fake built from --fake-n 5: threshold %d", c.Threshold)
	}
	if d := mods[0].describe(); d != "coord" {
		t.Errorf("a kind without Describe is described as %q, want its module's name", d)
	}
	if h := moduleHelp(kinds); !strings.HasSuffix(h, ": coord (sender coordination), fake (a test's)") {
		t.Errorf("--module's help: %q", h)
	}
	if u := moduleUsage(kinds); !strings.HasSuffix(u, "] [--module fake [--fake-n N]]\n") {
		t.Errorf("the modules' usage line: %q", u)
	}

	for _, tc := range []struct {
		names string
		args  []string
		want  string
	}{
		{"fake", []string{"--fake-n", "0"}, "--fake-n 0: want at least 1"},
		{"", []string{"--fake-n", "2"}, "--fake-n needs --module fake"},
		{"coord", []string{"--fake-n", "2"}, "--fake-n needs --module fake"},
		{"fake", []string{"--coord-early", "2"}, "--coord-early needs --module coord"},
		{"fake,nonesuch", nil, `--module "nonesuch": unknown module (have: coord, fake)`},
		{"fake,fake", nil, "--module fake given twice"},
	} {
		_, _, err := load(tc.names, tc.args...)
		if err == nil || err.Error() != tc.want || !errors.Is(err, errUsage) {
			t.Errorf("--module %q %v: %v, want the usage error %q", tc.names, tc.args, err, tc.want)
		}
	}
}
