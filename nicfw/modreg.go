package nicfw

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// ModuleKind is a kind of module that a command loads by name (`xam fw
// --module NAME`). The module's package registers its kind with
// RegisterModule in an init function, as database/sql's drivers do, so
// that the command knows modules only through the registry: it imports
// the package for that side effect, declares every registered kind's
// flags, and builds the kinds that --module names. The engine itself
// never looks at the registry: EngineConfig.Modules takes modules made
// any way.
type ModuleKind struct {
	// Name is what --module calls the module: not empty, and without a
	// comma (--module takes a comma-separated list). The module's flags
	// begin with it by convention (--coord-threshold), since they share
	// the command's flag set with the command's own and other modules'.
	Name string
	// Help says in a few words what the module does, for --module's help
	// ("sender coordination").
	Help string
	// Usage, if set, is the synopsis of the module's flags for the
	// command's usage line, e.g. "[--coord-threshold B]".
	Usage string
	// Flags declares the module's flags on fs and returns the function
	// that builds the module from them. The command calls Flags for every
	// registered kind before it parses its command line, so that its help
	// lists every module's flags; it calls build after parsing, and only
	// for a module that --module names. Build checks the flags' values
	// (fs.Visit tells which were given) and makes the module, nothing
	// more: its errors are the user's, reported as usage errors, so they
	// name the flag ("--coord-early -1: want 0 or more bytes"). A flag of
	// a module that is not loaded is refused by the command, unread.
	Flags func(fs *flag.FlagSet) (build func() (Module, error))
	// Describe, if set, says in a line what a module that build made is
	// set to do, for the daemon's log when it starts; without it the log
	// names the module (Module.Name).
	Describe func(Module) string
}

// moduleKinds is the registry: every kind RegisterModule was given, by
// name.
var moduleKinds = struct {
	sync.Mutex
	byName map[string]ModuleKind
}{byName: map[string]ModuleKind{}}

// RegisterModule makes kind k loadable by its name. It panics if k has no
// name or no Flags, if the name has a comma, or if another kind has
// registered the name already: registration runs in init functions, where
// a mistake is the program's, better found when it starts than resolved
// by the order packages happen to be initialized in.
func RegisterModule(k ModuleKind) {
	switch {
	case k.Name == "" || strings.Contains(k.Name, ","):
		panic(fmt.Sprintf("nicfw: RegisterModule: bad module name %q (not empty, no comma)", k.Name))
	case k.Flags == nil:
		panic(fmt.Sprintf("nicfw: RegisterModule: module %q has no Flags", k.Name))
	}
	moduleKinds.Lock()
	defer moduleKinds.Unlock()
	if _, dup := moduleKinds.byName[k.Name]; dup {
		panic(fmt.Sprintf("nicfw: RegisterModule: module %q registered twice", k.Name))
	}
	moduleKinds.byName[k.Name] = k
}

// ModuleKinds returns the registered kinds of module, sorted by name (a
// command's help and errors list them in that order).
func ModuleKinds() []ModuleKind {
	moduleKinds.Lock()
	defer moduleKinds.Unlock()
	kinds := make([]ModuleKind, 0, len(moduleKinds.byName))
	for _, k := range moduleKinds.byName {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b ModuleKind) int { return strings.Compare(a.Name, b.Name) })
	return kinds
}
