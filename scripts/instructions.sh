#!/bin/bash
# instructions.sh: the instructions one processor-only round trip executes,
# SSAM, AM-II and GRIM side by side, counted by valgrind (callgrind), and
# where they go.
#
#   scripts/instructions.sh            the three round trips: instructions per op, the
#                                      ratios, and each package's own share
#   scripts/instructions.sh -f [N]     and each one's N (40) costliest functions, self, per op
#   scripts/instructions.sh -c         and callgrind's cache and branch simulation: first-level
#                                      instruction and data cache misses and mispredicted
#                                      branches per op (a 32 KB, 8-way L1i and L1d)
#   scripts/instructions.sh -w [N]     and the round trip's code footprint: the distinct
#                                      instructions it executes every time, the 64-byte lines
#                                      they lie in (what an instruction cache must hold for the
#                                      round trip to run from it), and the N (20) functions
#                                      with the most lines
#
# A round trip on a memlink pair takes about a microsecond, and its time on
# a shared two-core machine drifts by more than the changes one makes to it;
# its instruction count does not. Each benchmark runs twice under callgrind,
# with n and 2n round trips, and the difference of the two counts over n is
# the count of one round trip: what both runs share (start, set-up, the
# runtime's own) cancels. The ratio of counts is not the ratio of times
# (instructions per cycle differ between paths), so a change made for speed
# is still measured in time (go test -bench, alternated rounds); this says
# where the instructions are. It installs valgrind when it is missing.
set -euo pipefail

cd "$(dirname "$0")/.."
funcs=0
footprint=0
sim=()
case ${1:-} in
-f) funcs=${2:-40} ;;
-c) sim=(--cache-sim=yes --branch-sim=yes --I1=32768,8,64 --D1=32768,8,64) ;;
-w)
	footprint=${2:-20}
	sim=(--dump-instr=yes)
	;;
esac
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
	echo "installing valgrind" >&2
	apt-get update -qq >/dev/null && apt-get install -y -qq valgrind >/dev/null
fi

n=20000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# count BIN BENCH ITERATIONS OUT: runs the benchmark under callgrind, the
# profile in OUT; prints the instructions counted, and with the simulation
# the first-level misses and the mispredicted branches. The runtime's
# preemption signals are off: callgrind can fail an assertion on them.
count() {
	GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind "${sim[@]}" --callgrind-out-file="$4" "$1" -test.run NONE \
		-test.bench "$2" -test.benchtime "$3x" -test.cpu 1 2>&1 >/dev/null |
		awk '/I *refs:|I1 *misses:|D1 *misses:|Mispredicts:/ {v = $0; sub(/^[^:]*: */, "", v); sub(/ .*/, "", v); gsub(",", "", v); printf "%s ", v} END {print ""}'
}

# lines FILE N TOP: the code footprint of a profile made with
# --dump-instr=yes of N round trips: the instructions executed at least N
# times (every round trip), the 64-byte lines that hold them, and the TOP
# functions with the most of those lines. It reads callgrind's compressed
# format: an instruction's address absolute (0x...), relative (+n, -n) or
# the same (*); the line after calls= is a call's inclusive cost, not the
# instruction's own.
lines() {
	perl -e '
		my ($n, $top) = ($ARGV[1], $ARGV[2]);
		open(my $in, "<", $ARGV[0]) or die;
		my (%cnt, %fnof, %name, $fn, $call);
		my $addr = 0;
		while (<$in>) {
			if (/^(c?)fn=\((\d+)\)(?: (.*))?$/) {
				my ($callee, $id) = ($1, $2);
				$name{$id} = $3 if defined $3;
				$fn = $name{$id} if $callee eq "";
				next;
			}
			if (/^calls=/) { $call = 1; next; }
			next unless /^(0x[0-9a-f]+|[+-]\d+|\*)\s+\S+\s+(\d+)/;
			my ($a, $c) = ($1, $2);
			if ($a =~ /^0x/) { $addr = hex($a) } elsif ($a ne "*") { $addr += $a }
			if ($call) { $call = 0; next; }
			$cnt{$addr} += $c;
			$fnof{$addr} = $fn;
		}
		my (%line, %per, $hot);
		for my $a (keys %cnt) {
			next if $cnt{$a} < $n;
			$hot++;
			my $l = int($a / 64);
			$line{$l} = 1;
			(my $f = $fnof{$a}) =~ s{github.com/xam-project/xam/}{};
			$per{$f}{$l} = 1;
		}
		my $nl = keys %line;
		printf "       %7d instructions executed every round trip, in %d 64-byte lines (%.1f KB)\n", $hot, $nl, $nl * 64 / 1024;
		my @f = sort { keys %{$per{$b}} <=> keys %{$per{$a}} } keys %per;
		printf "%8d  %s\n", scalar(keys %{$per{$_}}), $_ for @f[0 .. ($top < @f ? $top : @f) - 1];
	' "$1" "$2" "$3"
}

# self FILE: each function's own instructions in a callgrind profile.
self() {
	callgrind_annotate --show=Ir --sort=Ir --threshold=100 --auto=no "$1" 2>/dev/null |
		awk 'match($0, /^ *[0-9,]+ \([ 0-9.%]*\) +/) && substr($0, RLENGTH + 1) ~ /^[^ ]+:/ {
			n = substr($0, 1, RLENGTH); sub(/ *\(.*/, "", n); gsub(/[ ,]/, "", n)
			f = substr($0, RLENGTH + 1); sub(/ \[\/.*$/, "", f); sub(/^[^:]*:/, "", f); gsub(/ /, "", f)
			s[f] += n
		} END {for (f in s) print f, s[f]}'
}

ssam=0
for spec in "ssam ./am/ssam SSAMRoundTrip" "am-ii ./am/amii AMIIRoundTrip/args=2$" "grim ./am/grim GRIMRoundTrip$"; do
	read -r name pkg bench <<<"$spec"
	go test -c -o "$dir/$name.test" "$pkg"
	read -r -a a <<<"$(count "$dir/$name.test" "$bench" "$n" "$dir/$name.1")"
	read -r -a b <<<"$(count "$dir/$name.test" "$bench" "$((2 * n))" "$dir/$name.2")"
	per=$(((b[0] - a[0]) / n))
	if [[ $ssam == 0 ]]; then
		ssam=$per
	fi
	awk -v name="$name" -v per="$per" -v ssam="$ssam" \
		'BEGIN {printf "%-6s %7d instructions per round trip  %.2fx SSAM\n", name, per, per / ssam}'
	if [[ $footprint -gt 0 ]]; then
		lines "$dir/$name.1" "$n" "$footprint"
	elif [[ ${#sim[@]} -gt 0 ]]; then
		awk -v n="$n" -v i1="$((b[1] - a[1]))" -v d1="$((b[2] - a[2]))" -v br="$((b[3] - a[3]))" \
			'BEGIN {printf "       %7.1f L1i misses  %7.1f L1d misses  %7.1f mispredicted branches per round trip\n", i1 / n, d1 / n, br / n}'
	fi
	LC_ALL=C join -a 2 -e 0 -o 0,1.2,2.2 <(self "$dir/$name.1" | LC_ALL=C sort) <(self "$dir/$name.2" | LC_ALL=C sort) |
		awk -v n="$n" '{d = ($3 - $2) / n; if (d >= 1) printf "%8.0f  %s\n", d, $1}' |
		sed 's|github.com/xam-project/xam/||' | sort -rn >"$dir/$name.funcs"
	# By package: the layers of the round trip.
	awk '{p = $2; sub(/\.[^\/]*$/, "", p); s[p] += $1} END {for (p in s) if (s[p] >= 50) printf "%8d  %s\n", s[p], p}' \
		"$dir/$name.funcs" | sort -rn | tr '\n' ';' | sed 's/;$/\n/; s/;/\n/g'
	if [[ $funcs -gt 0 ]]; then
		echo "  costliest functions:"
		awk -v k="$funcs" 'NR <= k' "$dir/$name.funcs"
	fi
	echo
done
