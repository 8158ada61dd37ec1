#!/usr/bin/env bash
# Regenerates xam_bpfel.go and xam_bpfel.o from xdp.c with bpf2go. The
# generated files are committed: building and testing xam needs no clang, only
# changing xdp.c does.
#
# Usage (from the repository root, as root the first time to install the
# toolchain from Debian's packages):
#   go generate ./loader        (runs this script)
#   loader/gen.sh
set -euo pipefail
cd "$(dirname "$0")"

# The toolchain is pinned to clang 14 so that the committed object is
# reproducible: the same xdp.c gives the same xam_bpfel.o.
CC=clang-14
STRIP=llvm-strip-14
need=()
command -v "$CC" >/dev/null 2>&1 || need+=(clang-14)
command -v "$STRIP" >/dev/null 2>&1 || need+=(llvm-14)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "loader/gen.sh: missing packages: ${need[*]}; run as root to install them" >&2
		exit 1
	fi
	echo "loader/gen.sh: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# <asm/types.h>, included by the uapi headers, lives in the multiarch
# directory (x86_64-linux-gnu, aarch64-linux-gnu, ...).
multiarch=$(gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")

exec go tool bpf2go -cc "$CC" -strip "$STRIP" -target bpfel -go-package loader \
	-type counters -type faults -type dup_config -type dup_counters \
	xam xdp.c -- -Wall -Werror -I"/usr/include/$multiarch"
