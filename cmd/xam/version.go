package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/xam-project/xam/internal/netdev"
)

// versionInfo is what `xam version` reports: which xam this is, built from
// which revision with which Go, running on which kernel.
type versionInfo struct {
	Version  string        `json:"version"`            // the release (-X main.version) or the module's version
	Module   string        `json:"module"`             // the main module's path
	Revision string        `json:"revision,omitempty"` // the VCS revision built from, when the build knew it
	Time     string        `json:"time,omitempty"`     // the revision's commit time (RFC 3339)
	Modified *bool         `json:"modified,omitempty"` // whether the tree had uncommitted changes
	Go       string        `json:"go"`                 // the Go release that built it
	Platform string        `json:"platform"`           // GOOS/GOARCH
	Kernel   *netdev.Uname `json:"kernel,omitempty"`   // the running kernel
}

// readVersion gathers the version from the build information the Go
// toolchain embeds: `go build` and `go install` in a git checkout record
// the revision, its time and whether the tree was modified; `go run` and
// test binaries do not, and then those are left empty.
func readVersion() versionInfo {
	v := versionInfo{Version: version, Module: "github.com/xam-project/xam", Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			v.Module = bi.Main.Path
		}
		if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				m := s.Value == "true"
				v.Modified = &m
			}
		}
	}
	if k, err := netdev.Kernel(); err == nil {
		v.Kernel = &k
	}
	return v
}

func runVersion(e *env, args []string) error {
	fs := newFlags(e, "version", "version [--json]   (also xam --version)")
	asJSON := fs.Bool("json", false, "print the version as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := readVersion()
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := e.stdout
	fmt.Fprintln(w, "xam", v.Version)
	fmt.Fprintf(w, "module    %s\n", v.Module)
	if v.Revision == "" {
		fmt.Fprintln(w, "revision  unknown (built without version control information: go run, go test, or -buildvcs=false)")
	} else {
		fmt.Fprintf(w, "revision  %s\n", v.Revision)
		if v.Time != "" {
			fmt.Fprintf(w, "time      %s\n", v.Time)
		}
		if v.Modified != nil {
			fmt.Fprintf(w, "modified  %s\n", map[bool]string{false: "no", true: "yes (uncommitted changes in the tree)"}[*v.Modified])
		}
	}
	fmt.Fprintf(w, "go        %s %s\n", v.Go, v.Platform)
	if k := v.Kernel; k != nil {
		fmt.Fprintf(w, "kernel    %s\n", strings.Join([]string{k.Sysname, k.Release, k.Version, k.Machine}, " "))
	} else {
		fmt.Fprintln(w, "kernel    unknown")
	}
	return nil
}
