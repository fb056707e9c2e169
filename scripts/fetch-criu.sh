#!/bin/sh
# Fetch CRIU's upstream tarball from Debian's unstable source package through
# a private apt configuration (apt-private.sh). The tarball's sha256 is
# the one pinned here, and the suite's Sources index must list it the same.
#
# usage: fetch-criu.sh DESTDIR
set -eu

VERSION=4.2.1
SHA256=29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9
# sid carries it now; testing once it migrates there.
SUITES="sid forky"
TARBALL="criu_${VERSION}.orig.tar.xz"
dest=$1
mkdir -p "$dest"
[ -f "$dest/$TARBALL" ] && exit 0

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=apt-private.sh
. "$here/apt-private.sh"

expected=""
for suite in $SUITES; do
	apt_suite deb-src "$suite" || continue
	srcinfo=$(apt_cache showsrc criu 2>/dev/null)
	expected=$(echo "$srcinfo" |
		awk -v t="$TARBALL" '/^Checksums-Sha256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == t { print $1; exit }')
	[ -n "$expected" ] && break
done
if [ -z "$expected" ]; then
	echo "fetch-criu: $TARBALL is not listed in the Sources index of $SUITES" >&2
	exit 1
fi
if [ "$expected" != "$SHA256" ]; then
	echo "fetch-criu: the $suite Sources index lists $TARBALL as $expected, not $SHA256" >&2
	exit 1
fi

# The .dsc and Debian tarball may be gone from the mirror; only the upstream
# tarball is needed, so a partial download is fine once its hash checks out.
srcversion=$(echo "$srcinfo" | awk -v v="$VERSION" '/^Version:/ && index($2, v) == 1 { print $2; exit }')
(cd "$work" && apt_private source --download-only "criu=$srcversion" >/dev/null 2>&1) || true
if [ ! -f "$work/$TARBALL" ]; then
	echo "fetch-criu: could not download $TARBALL" >&2
	exit 1
fi
actual=$(sha256sum "$work/$TARBALL" | cut -d' ' -f1)
if [ "$actual" != "$expected" ]; then
	echo "fetch-criu: sha256 mismatch for $TARBALL: got $actual, Sources index says $expected" >&2
	exit 1
fi
mv "$work/$TARBALL" "$dest/$TARBALL"
echo "fetch-criu: $TARBALL verified (sha256 $actual)"
