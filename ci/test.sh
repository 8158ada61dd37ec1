#!/usr/bin/env bash
# xam's test command (README: "Run the tests"). Run as root: the data-path
# tests create network namespaces, veth pairs and XDP programs.
#
#   ci/test.sh            everything: deps, vet, tests, the Debian package installed and
#                         run (scripts/package-check.sh), race, fuzz, benchmarks once,
#                         and `xam bench all --quick` with its report's structure checked
#   FUZZTIME=1000000x ci/test.sh   fuzz each target longer (default 100000x)
#
# Under CI=true (as .ci/run sets it), a test that would skip for lack of
# privileges or kernel features fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."

# Fuzzing budgets are counts of executions, not durations: with a duration,
# Go 1.26's fuzz coordinator can report "context deadline exceeded" at the
# deadline on a loaded machine without having found anything (go.dev/issue/75804,
# fixed in Go 1.27); a count has no deadline to race.
FUZZTIME=${FUZZTIME:-100000x}
# Packages with concurrency, tested again under the race detector.
RACE_PKGS=(./internal/... ./cells/... ./loader/... ./afxdp/... ./driver/... ./cluster/... ./am/... ./nicfw/... ./bench/...)

step() { printf '\n==> %s\n' "$*"; }

step "dependencies"
scripts/deps.sh
go version

step "go vet"
go vet ./...

step "go test (gofmt is enforced by internal/lint)"
go test -count=1 ./...

step "the Debian package: built, installed, run, purged"
scripts/package-check.sh

step "go test -race"
go test -race -count=1 "${RACE_PKGS[@]}"

step "fuzz (${FUZZTIME} per target)"
# Every Fuzz function in the module, by package.
while read -r dir name; do
	echo "--- $name ($dir)"
	go test -run=NONE -fuzz="^${name}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=2000x "./$dir"
done < <(grep -roP --include='*_test.go' '^func \KFuzz\w+' . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:(Fuzz\w+)$#\1 \2#' | sort -u)

step "benchmarks, once each"
go test -run=NONE -bench=. -benchtime=1x ./...

step "xam bench all --quick: the report's structure (not its speed)"
report=$(mktemp -d)
trap 'rm -rf "$report"' EXIT
go run ./cmd/xam bench all --quick --out "$report"
go test -count=1 -run '^TestReportStructure$' ./bench -args -report "$report"

step "ok"
