package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/xam-project/xam/nicfw"
)

// moduleFlags is what `xam fw` knows of the extension modules: the kinds
// registered with nicfw.RegisterModule, the flags each declared on the
// command's flag set, and what builds each from them. The command has no
// code of any one module: a module's package registers it by name.
type moduleFlags struct {
	fs    *flag.FlagSet
	kinds []*declaredModule          // sorted by name
	named map[string]*declaredModule // by name
	owner map[string]string          // the module that declared each flag, by flag name
}

// declaredModule is a registered kind of module whose flags are declared.
type declaredModule struct {
	kind  nicfw.ModuleKind
	build func() (nicfw.Module, error)
}

// fwModule is a module that --module loads, with the kind it was built
// from (which describes it).
type fwModule struct {
	mod  nicfw.Module
	kind nicfw.ModuleKind
}

// describe says what the module is set to do, for the daemon's first
// lines.
func (m fwModule) describe() string {
	if m.kind.Describe == nil {
		return m.mod.Name()
	}
	return m.kind.Describe(m.mod)
}

// engineModules returns the modules themselves, for the engine's
// configuration.
func engineModules(mods []fwModule) []nicfw.Module {
	var list []nicfw.Module
	for _, m := range mods {
		list = append(list, m.mod)
	}
	return list
}

// declareModules declares the flags of every kind in kinds on fs, so that
// `xam fw -h` lists them whether or not a module is loaded. The flags a
// kind adds to fs are its own: given without their module, they are
// refused (load).
func declareModules(fs *flag.FlagSet, kinds []nicfw.ModuleKind) *moduleFlags {
	mf := &moduleFlags{fs: fs, named: map[string]*declaredModule{}, owner: map[string]string{}}
	for _, k := range kinds {
		before := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
		d := &declaredModule{kind: k, build: k.Flags(fs)}
		fs.VisitAll(func(f *flag.Flag) {
			if !before[f.Name] {
				mf.owner[f.Name] = k.Name
			}
		})
		mf.kinds = append(mf.kinds, d)
		mf.named[k.Name] = d
	}
	return mf
}

// load returns the modules that names lists (--module, comma-separated),
// in its order, each built from its flags once fs is parsed. A module's
// flag given without its module is an error rather than ignored.
func (mf *moduleFlags) load(names string) ([]fwModule, error) {
	var mods []fwModule
	loaded := map[string]bool{}
	for name := range strings.SplitSeq(names, ",") {
		d := mf.named[name]
		switch {
		case name == "":
			continue
		case loaded[name]:
			return nil, usageError("--module %s given twice", name)
		case d == nil:
			return nil, usageError("--module %q: unknown module (have: %s)", name, mf.names())
		}
		loaded[name] = true
		m, err := d.build()
		if err != nil {
			// A module's build only checks its flags: what it refuses is
			// how xam was invoked.
			return nil, usageError("%v", err)
		}
		mods = append(mods, fwModule{mod: m, kind: d.kind})
	}
	var stray error
	mf.fs.Visit(func(f *flag.Flag) {
		if owner, ok := mf.owner[f.Name]; ok && !loaded[owner] && stray == nil {
			stray = usageError("--%s needs --module %s", f.Name, owner)
		}
	})
	if stray != nil {
		return nil, stray
	}
	return mods, nil
}

// names lists the declared modules' names, for errors.
func (mf *moduleFlags) names() string {
	if len(mf.kinds) == 0 {
		return "none"
	}
	var names []string
	for _, d := range mf.kinds {
		names = append(names, d.kind.Name)
	}
	return strings.Join(names, ", ")
}

// moduleHelp is --module's help: the registered modules, each with what
// it does.
func moduleHelp(kinds []nicfw.ModuleKind) string {
	var list []string
	for _, k := range kinds {
		if k.Help == "" {
			list = append(list, k.Name)
		} else {
			list = append(list, fmt.Sprintf("%s (%s)", k.Name, k.Help))
		}
	}
	if len(list) == 0 {
		list = append(list, "none registered")
	}
	return "extension modules to load, comma-separated: " + strings.Join(list, ", ")
}

// moduleUsage is the line of `xam fw`'s usage that shows the registered
// modules and their flags ("" with none).
func moduleUsage(kinds []nicfw.ModuleKind) string {
	var list []string
	for _, k := range kinds {
		u := "[--module " + k.Name
		if k.Usage != "" {
			u += " " + k.Usage
		}
		list = append(list, u+"]")
	}
	if len(list) == 0 {
		return ""
	}
	return "       " + strings.Join(list, " ") + "\n"
}
