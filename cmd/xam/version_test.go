package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/netdev"
)

// TestVersionUnstamped: a test binary carries no VCS information, and xam
// version says so instead of printing empty fields; --version is the same
// command, and --json the same facts.
func TestVersionUnstamped(t *testing.T) {
	code, out, errs := xam(t, nil, "version")
	if code != 0 {
		t.Fatalf("xam version: exit %d: %s", code, errs)
	}
	k, err := netdev.Kernel()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"xam dev\n", "module    github.com/xam-project/xam\n", "revision  unknown (",
		"go        " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n", "kernel    Linux " + k.Release + " "} {
		if !strings.Contains(out, want) {
			t.Errorf("xam version lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "time ") || strings.Contains(out, "modified") {
		t.Errorf("xam version prints a time or modified without a revision:\n%s", out)
	}
	if _, again, _ := xam(t, nil, "--version"); again != out {
		t.Errorf("xam --version:\n%s\nxam version:\n%s", again, out)
	}
	_, js, _ := xam(t, nil, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatalf("xam version --json: %v\n%s", err, js)
	}
	if v.Version != "dev" || v.Revision != "" || v.Modified != nil || v.Go != runtime.Version() || v.Kernel == nil || v.Kernel.Release != k.Release {
		t.Errorf("xam version --json = %+v", v)
	}
	if code, _, errs := xam(t, nil, "version", "extra"); code != 2 || !strings.Contains(errs, `unexpected argument "extra"`) {
		t.Errorf("xam version extra: exit %d, %q; want 2 and the argument named", code, errs)
	}
}

// TestVersionStamped builds xam as a user would, with `go build` in a git
// checkout: a repository made of this working tree's files, committed at
// a known time, plus an untracked file, so the build records the revision,
// its time and a modified tree. xam version must report exactly those; a
// release build (-X main.version, no VCS information) reports its version
// and an unknown revision.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xam twice")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not in a git checkout (a source archive): nothing to stamp")
	}
	clone := t.TempDir()
	copyTree(t, strings.TrimSpace(string(top)), clone)
	commitTime := time.Date(2024, 2, 29, 12, 34, 56, 0, time.UTC)
	gitOut(t, clone, "init", "-q")
	gitOut(t, clone, "add", "-A")
	t.Setenv("GIT_COMMITTER_DATE", commitTime.Format(time.RFC3339))
	gitOut(t, clone, "-c", "user.name=xam", "-c", "user.email=xam@localhost", "commit", "-q", "--no-verify", "-m", "test")
	head := gitOut(t, clone, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(clone, "untracked"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	v := buildVersion(t, clone, "-buildvcs=true")
	if v.Revision != head || v.Modified == nil || !*v.Modified {
		t.Errorf("revision %q modified %v; want %s and true", v.Revision, v.Modified, head)
	}
	if got, err := time.Parse(time.RFC3339, v.Time); err != nil || !got.Equal(commitTime) {
		t.Errorf("time %q; want the commit's, %v", v.Time, commitTime)
	}
	// Go stamps the module with a pseudo-version naming the revision.
	if !strings.Contains(v.Version, head[:12]) || !strings.HasSuffix(v.Version, "+dirty") {
		t.Errorf("version %q; want a pseudo-version of %s, +dirty", v.Version, head[:12])
	}

	v = buildVersion(t, clone, "-buildvcs=false", "-ldflags=-X main.version=1.2.3")
	if v.Version != "1.2.3" || v.Revision != "" || v.Time != "" || v.Modified != nil {
		t.Errorf("release build: %+v; want version 1.2.3 and no revision", v)
	}
}

// buildVersion builds xam in dir with the given build flags and returns
// what its `xam version --json` says, after checking the text form says
// the same.
func buildVersion(t *testing.T, dir string, flags ...string) versionInfo {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "xam")
	args := append([]string{"build", "-trimpath", "-o", bin}, flags...)
	cmd := exec.Command("go", append(args, "./cmd/xam")...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	js, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("xam version --json: %v", err)
	}
	var v versionInfo
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatalf("xam version --json: %v\n%s", err, js)
	}
	text, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("xam --version: %v", err)
	}
	want := []string{"xam " + v.Version + "\n"}
	if v.Revision != "" {
		want = append(want, "revision  "+v.Revision+"\n", "time      "+v.Time+"\n")
	} else {
		want = append(want, "revision  unknown")
	}
	for _, w := range want {
		if !strings.Contains(string(text), w) {
			t.Errorf("xam --version lacks %q:\n%s", w, text)
		}
	}
	return v
}

// copyTree copies the files git would check out of the repository at top
// (tracked, and untracked but not ignored) into dir.
func copyTree(t *testing.T, top, dir string) {
	t.Helper()
	list, err := exec.Command("git", "-C", top, "ls-files", "-z", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for name := range strings.SplitSeq(strings.TrimSuffix(string(list), "\x00"), "\x00") {
		src := filepath.Join(top, name)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the tree, or a link
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// gitOut runs git in dir and returns its output, trimmed.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
