#!/bin/bash
# pgo.sh: remakes cmd/xam/default.pgo, the CPU profile that go build uses
# to optimise the xam binary (profile-guided optimisation: hot calls
# inlined, interface calls devirtualised), from the processor-only
# message paths of the three APIs: SSAM's, AM-II's and GRIM's round trips
# and SSAM's batched and AM-II's coalesced streams (go test -bench,
# memlink, no wire).
#
#   scripts/pgo.sh            write cmd/xam/default.pgo
#
# go build and go run of ./cmd/xam pick the profile up by themselves
# (-pgo=auto); go test does not, so the package benchmarks measure the code
# without it. An application of its own builds with -pgo=PATH to the same
# file. Remake the profile when the message paths change much: an old one
# still builds, it just optimises less.
set -euo pipefail

cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

run() { # package, benchmarks, profile
	go test -c -o "$dir/t" "$1"
	"$dir/t" -test.run NONE -test.bench "$2" -test.benchtime 2s -test.cpuprofile "$3" >/dev/null
}
run ./am/ssam 'SSAMRoundTrip|SSAMStream' "$dir/ssam.prof"
run ./am/amii 'AMIIRoundTrip/args=(2|4)$|AMIIStream' "$dir/amii.prof"
run ./am/grim 'GRIMRoundTrip$' "$dir/grim.prof"
go tool pprof -proto "$dir/ssam.prof" "$dir/amii.prof" "$dir/grim.prof" >cmd/xam/default.pgo
echo "wrote cmd/xam/default.pgo ($(stat -c %s cmd/xam/default.pgo) bytes)"
