#!/usr/bin/env bash
# Installs what xam's tests need from Debian's packages, when it is missing.
# Usage: scripts/deps.sh            (as root; does nothing when all is present)
set -euo pipefail

# command -> Debian package
declare -A need=(
	[tshark]=tshark
	[ip]=iproute2
	# scripts/package-check.sh: the systemd unit, the manual pages
	[systemd-analyze]=systemd
	[groff]=groff-base
	# internal/slurmtest: a private Slurm cluster for package cluster's tests
	# (not slurm-wlm-emulator: it cannot run with 22.05's shared library and
	# would take over the slurmd and slurmctld alternatives)
	[slurmd]=slurmd
	[slurmctld]=slurmctld
	[srun]=slurm-client
	[munged]=munge
)

# Optional: a peer of the benchmarks (UCX active messages, `xam bench
# logp|amii|all`); where it cannot be installed, the report says "not
# installed" and the tests that need it skip (fail under CI=true).
declare -A want=(
	[ucx_perftest]=ucx-utils
)

missing=()
for cmd in "${!need[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
optional=()
for cmd in "${!want[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || optional+=("${want[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	[ ${#optional[@]} -gt 0 ] && echo "scripts/deps.sh: optional packages missing: ${optional[*]}; run as root to install them" >&2
	[ ${#missing[@]} -eq 0 ] && exit 0
	echo "scripts/deps.sh: missing packages: ${missing[*]}; run as root to install them" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || [ ${#missing[@]} -eq 0 ]
if [ ${#optional[@]} -gt 0 ]; then
	echo "scripts/deps.sh: installing ${optional[*]} (optional)" >&2
	apt-get install -y -qq --no-install-recommends "${optional[@]}" >/dev/null ||
		echo "scripts/deps.sh: could not install ${optional[*]}; the benchmarks report UCX as not installed" >&2
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "scripts/deps.sh: installing ${missing[*]}" >&2
# tshark asks whether non-root users may capture; answer no.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
