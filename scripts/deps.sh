#!/usr/bin/env bash
# Installs what xam's tests need from Debian's packages, when it is missing.
# Usage: scripts/deps.sh            (as root; does nothing when all is present)
set -euo pipefail

# command -> Debian package
declare -A need=(
	[tshark]=tshark
	[ip]=iproute2
)

missing=()
for cmd in "${!need[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "scripts/deps.sh: missing packages: ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "scripts/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer no.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
