package nicfw

import (
	"flag"
	"fmt"
	"strings"
	"testing"
)

// TestRegisterModule: a module kind registered by name is listed, sorted
// by name, and builds its module from the flags it declared; the registry
// refuses a second kind of a taken name, a name that --module could not
// name, and a kind without flags, and keeps the first kind of the name.
func TestRegisterModule(t *testing.T) {
	moduleKinds.Lock()
	saved := moduleKinds.byName
	moduleKinds.byName = map[string]ModuleKind{}
	moduleKinds.Unlock()
	t.Cleanup(func() {
		moduleKinds.Lock()
		moduleKinds.byName = saved
		moduleKinds.Unlock()
	})

	// kind is a kind of probe module whose flag --NAME-probes is the
	// module's initial tick count.
	kind := func(name, help string) ModuleKind {
		return ModuleKind{Name: name, Help: help, Flags: func(fs *flag.FlagSet) func() (Module, error) {
			n := fs.Int(name+"-probes", 0, name+": the probe's initial ticks")
			return func() (Module, error) {
				if *n < 0 {
					return nil, fmt.Errorf("--%s-probes %d: want 0 or more", name, *n)
				}
				p := newProbe()
				p.ticks = *n
				return p, nil
			}
		}}
	}
	RegisterModule(kind("zeta", "the last"))
	RegisterModule(kind("alpha", "the first"))

	kinds := ModuleKinds()
	if len(kinds) != 2 || kinds[0].Name != "alpha" || kinds[1].Name != "zeta" {
		t.Fatalf("registered kinds %v, want alpha and zeta, in that order", kinds)
	}
	fs := flag.NewFlagSet("fw", flag.ContinueOnError)
	build := kinds[0].Flags(fs)
	if fs.Lookup("alpha-probes") == nil {
		t.Fatal("alpha's flag --alpha-probes is not declared")
	}
	if err := fs.Parse([]string{"--alpha-probes", "7"}); err != nil {
		t.Fatal(err)
	}
	m, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := m.(*probeModule); !ok || p.ticks != 7 {
		t.Errorf("alpha built %#v, want a probe with 7 ticks", m)
	}

	for _, tc := range []struct {
		kind ModuleKind
		want string
	}{
		{kind("alpha", "a second alpha"), `module "alpha" registered twice`},
		{kind("", "no name"), `bad module name ""`},
		{kind("a,b", "a list"), `bad module name "a,b"`},
		{ModuleKind{Name: "noflags"}, `module "noflags" has no Flags`},
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tc.want) {
					t.Errorf("RegisterModule(%q): panic %v, want one with %q", tc.kind.Name, r, tc.want)
				}
			}()
			RegisterModule(tc.kind)
		}()
	}
	if kinds := ModuleKinds(); len(kinds) != 2 || kinds[0].Help != "the first" {
		t.Errorf("after the refusals the registry holds %v, want the first alpha and zeta", kinds)
	}
}
