#!/bin/sh
# Fetch containerd 2.1 (containerd, ctr, containerd-shim-runc-v2) from
# Debian's unstable binary package through a private apt configuration
# (apt-private.sh): the containerd that current distributions run, beside
# bookworm's 1.6, for the e2e tests. Its Go binaries need glibc 2.34, which
# bookworm has. apt checks the package against the suite's signed index.
#
# usage: fetch-containerd.sh DOWNLOADDIR DESTDIR (DESTDIR/bin gets them)
set -eu

VERSION=2.1.9
SUITES="sid forky"
downloads=$1
dest=$2
[ -x "$dest/bin/containerd" ] && [ -x "$dest/bin/ctr" ] && [ -x "$dest/bin/containerd-shim-runc-v2" ] && exit 0
mkdir -p "$downloads"

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=apt-private.sh
. "$here/apt-private.sh"

deb=$(ls "$downloads"/containerd_"$VERSION"+*_amd64.deb 2>/dev/null | head -n1)
if [ -z "$deb" ]; then
	pkgversion=""
	for suite in $SUITES; do
		apt_suite deb "$suite" || continue
		pkgversion=$(apt_cache madison containerd 2>/dev/null |
			awk -v v="$VERSION" '{ gsub(/ /, "", $3) } index($3, v "+") == 1 || index($3, v "-") == 1 { print $3; exit }')
		[ -n "$pkgversion" ] && break
	done
	if [ -z "$pkgversion" ]; then
		echo "fetch-containerd: containerd $VERSION is not in $SUITES" >&2
		exit 1
	fi
	(cd "$work" && apt_private download "containerd=$pkgversion" >/dev/null) ||
		{ echo "fetch-containerd: could not download containerd $pkgversion" >&2; exit 1; }
	mv "$work"/containerd_*.deb "$downloads/"
	deb=$(ls "$downloads"/containerd_"$VERSION"+*_amd64.deb | head -n1)
fi
rm -rf "$work/x" "$dest"
dpkg-deb -x "$deb" "$work/x"
mkdir -p "$dest/bin"
for b in containerd ctr containerd-shim-runc-v2; do
	install -m 755 "$work/x/usr/bin/$b" "$dest/bin/$b"
done
echo "fetch-containerd: $("$dest/bin/containerd" --version)"
