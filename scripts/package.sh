#!/usr/bin/env bash
# Builds xam's Debian package with nfpm (packaging/nfpm.yaml).
#
#   scripts/package.sh [DIR]     writes DIR/xam_VERSION_ARCH.deb (default DIR: dist)
#
# The package holds the static xam binary (CGO_ENABLED=0), stamped with the
# version; the xam-fw systemd unit and its /etc/default/xam-fw; the manual
# pages, written by the binary itself (xam man); the Wireshark dissector;
# and the docs. The version comes from git describe --tags (v1.2.3 gives
# 1.2.3, three commits later 1.2.3+3.gHASH); without a tag it is
# 0.0.0~git<commit time>.<hash>, and a tree with uncommitted changes adds
# .dirty. XAM_VERSION overrides it; GOARCH (amd64 or arm64) cross-builds.
# nfpm comes through the Go module proxy at the version pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."

NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
out=${1:-dist}
arch=${GOARCH:-$(go env GOARCH)}
case $arch in
amd64) multiarch=x86_64-linux-gnu ;;
arm64) multiarch=aarch64-linux-gnu ;;
*)
	echo "scripts/package.sh: GOARCH $arch: want amd64 or arm64" >&2
	exit 2
	;;
esac

# version prints the package's version (see above).
version() {
	if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
		echo 0.0.0
		return
	fi
	local d
	if d=$(git describe --tags --match 'v[0-9]*' --dirty=.dirty 2>/dev/null); then
		# v1.2.3-rc1-3-gabc.dirty -> 1.2.3~rc1+3.gabc.dirty
		d=$(sed -E 's/-([0-9]+)-(g[0-9a-f]+)/+\1.\2/' <<<"${d#v}")
		echo "${d//-/\~}"
		return
	fi
	local when rev dirty=
	when=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
	rev=$(git rev-parse --short=12 HEAD)
	git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
	echo "0.0.0~git${when}.${rev}${dirty}"
}
XAM_VERSION=${XAM_VERSION:-$(version)}

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
echo "scripts/package.sh: building xam $XAM_VERSION for linux/$arch" >&2
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=auto \
	-ldflags "-s -w -X main.version=$XAM_VERSION" -o "$build/xam" ./cmd/xam

# The manual pages come from the command's own help: from the packaged
# binary where it runs here, else from the same source for this machine.
if [ "$arch" = "$(go env GOHOSTARCH)" ]; then
	"$build/xam" man --dir "$build/man" >/dev/null
else
	go run -ldflags "-X main.version=$XAM_VERSION" ./cmd/xam man --dir "$build/man" >/dev/null
fi
gzip -9n "$build"/man/*.1

mkdir -p "$out"
maintainer=${DEBFULLNAME:-xam project}
export XAM_VERSION XAM_ARCH=$arch XAM_BUILD=$build XAM_MULTIARCH=$multiarch \
	XAM_MAINTAINER="$maintainer <${DEBEMAIL:-xam@localhost}>"
GOFLAGS= go run "$NFPM" package --config packaging/nfpm.yaml --packager deb --target "$out/"
