#!/usr/bin/env bash
# Builds xam's Debian package, installs it on this machine and runs what it
# installed, then purges it (ci/test.sh runs this; it also runs alone):
#
#   scripts/package-check.sh       (as root, on a machine without the xam package)
#
# It checks: /usr/bin/xam version names the package's version; every
# command xam help lists has a manual page, and each page renders without a
# warning; systemd-analyze verifies the xam-fw unit; tshark loads the
# installed dissector; xam doctor passes, also on a lab device; a raw ping
# from the installed binary; and two installed daemons on a lab, each run
# with only the capabilities the unit grants, carry an AM-II ping.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
	echo "scripts/package-check.sh: run as root (it installs a package and builds labs)" >&2
	exit 1
fi
if dpkg-query -W -f '${Status}' xam 2>/dev/null | grep -q installed; then
	echo "scripts/package-check.sh: the xam package is installed already; remove it first (dpkg --purge xam)" >&2
	exit 1
fi

step() { printf -- '--- %s\n' "$*"; }
fail() {
	echo "scripts/package-check.sh: $*" >&2
	exit 1
}

work=$(mktemp -d)
lab=pkg$$
installed=
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	{ wait; } 2>/dev/null || true
	if [ -n "$installed" ]; then
		/usr/bin/xam lab down --name "$lab" >/dev/null 2>&1 || true
		dpkg --purge xam >/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

step "build the package"
scripts/package.sh "$work/dist"
deb=$(echo "$work"/dist/xam_*.deb)
[ -f "$deb" ] || fail "scripts/package.sh made no .deb"

step "install it"
installed=yes
dpkg -i "$deb" >/dev/null
xam=/usr/bin/xam

step "xam version"
$xam version
want=$(dpkg-query -W -f '${Version}' xam)
[ "$($xam --version | head -1)" = "xam $want" ] || fail "xam --version does not say the package's version, $want"

step "manual pages"
# Read from the package itself: minimal Debian images tell dpkg to leave
# /usr/share/man out when it installs.
dpkg-deb -x "$deb" "$work/root"
man1=$work/root/usr/share/man/man1
for cmd in "" $($xam help | sed -n 's/^  \([a-z]\+\) .*/-\1/p'); do
	page=$man1/xam$cmd.1.gz
	[ -f "$page" ] || fail "no manual page xam$cmd(1) in the package"
	warnings=$(zcat "$page" | groff -man -ww -z -Tutf8 2>&1)
	[ -z "$warnings" ] || fail "xam$cmd(1): $warnings"
done

step "systemd unit"
unit=/usr/lib/systemd/system/xam-fw.service
[ -f /etc/default/xam-fw ] || fail "no /etc/default/xam-fw"
# verify also looks up the unit's Documentation= page, where pages are
# installed.
man=--man=yes
[ -f /usr/share/man/man1/xam-fw.1.gz ] || man=--man=no
systemd-analyze verify "$man" "$unit"

step "Wireshark dissector"
tshark -G protocols 2>/dev/null | awk -F'\t' '$3 == "xam" { found = 1 } END { exit !found }' ||
	fail "tshark does not load the installed dissector"

step "xam doctor"
$xam doctor
$xam lab up --name "$lab" >/dev/null
$xam doctor --dev eth0 --netns "xam-$lab-h0"

step "xam ping --api raw (a lab of its own)"
$xam ping --api raw --count 100

step "two daemons with the unit's capabilities, an AM-II ping through them"
caps=-all
for c in $(sed -n 's/^CapabilityBoundingSet=//p' "$unit"); do
	c=${c#CAP_}
	caps+=",+${c,,}"
done
[ "$caps" != -all ] || fail "$unit grants no capabilities"
# The unit lifts the locked-memory limit (LimitMEMLOCK=infinity) for the
# AF_XDP UMEM; where this process may not (no CAP_SYS_RESOURCE, as in a
# container), CAP_IPC_LOCK stands in for it.
limit=(prlimit --memlock=unlimited:unlimited)
if ! "${limit[@]}" true 2>/dev/null; then
	echo "(cannot lift RLIMIT_MEMLOCK here: CAP_IPC_LOCK stands in for the unit's LimitMEMLOCK=infinity)"
	limit=()
	caps+=",+ipc_lock"
fi
mac() { ip -n "xam-$lab-h$1" -br link show eth0 | awk '{ print $3 }'; }
for i in 0 1; do
	"${limit[@]}" setpriv --bounding-set="$caps" --no-new-privs \
		$xam fw --dev eth0 --netns "xam-$lab-h$i" --id $((i + 1)) --host "$((2 - i))=$(mac $((1 - i)))" \
		--socket "$work/h$i.sock" --sleep 50us >"$work/fw$i.log" 2>&1 &
	pids+=($!)
done
# The daemons are up when they answer xam fw stats; the server's endpoint
# is open when its daemon lists it.
waitfor() {
	local what=$1 i
	shift
	for i in $(seq 200); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	cat "$work"/fw*.log >&2
	fail "$what: not after 20 s"
}
for i in 0 1; do
	waitfor "daemon $i" $xam fw stats --socket "$work/h$i.sock"
done
$xam ping --api amii --socket "$work/h1.sock" --peer-host 1 --serve >"$work/serve.log" 2>&1 &
pids+=($!)
listed() { $xam fw stats --socket "$work/h1.sock" --json | grep -q '"endpoint_list": \['; }
waitfor "the server's endpoint" listed
$xam ping --api amii --socket "$work/h0.sock" --peer-host 2 --count 100

step "remove it"
kill "${pids[@]}"
wait || true
pids=()
$xam lab down --name "$lab" >/dev/null
dpkg --purge xam >/dev/null
installed=
[ ! -e /usr/bin/xam ] && [ ! -e /etc/default/xam-fw ] && [ ! -e "$unit" ] || fail "dpkg --purge xam left files behind"
step "ok"
