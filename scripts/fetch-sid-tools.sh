#!/bin/sh
# Fetch the tools current distributions run, from Debian's unstable binary
# packages through a private apt configuration (apt-private.sh), for the
# e2e tests: containerd 2.1 (containerd, ctr, containerd-shim-runc-v2),
# beside bookworm's 1.6, whose Go binaries need glibc 2.34, which bookworm
# has; and checkpointctl 1.3, which needs glibc 2.38: it runs through the
# suite's own loader and C library (DESTDIR/libc), bookworm's being 2.36.
# And runc 1.3 for the GPU machine's bundle alone (DESTDIR/gpu: it needs
# glibc 2.38 and runs where that is, gpu-bundle.sh). apt checks each
# package against the suite's signed index.
#
# usage: fetch-sid-tools.sh DOWNLOADDIR DESTDIR (DESTDIR/bin, libc, gpu)
set -eu

CONTAINERD=2.1.9
CHECKPOINTCTL=1.3.0
RUNC=1.3.6
SUITES="sid forky"
downloads=$1
dest=$2
done_mark="$dest/.fetched-$CONTAINERD-$CHECKPOINTCTL-$RUNC"
[ -f "$done_mark" ] && exit 0
mkdir -p "$downloads"

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=apt-private.sh
. "$here/apt-private.sh"

suite_ready=""
# deb PACKAGE UPSTREAM: the package's .deb of that upstream version (any,
# where UPSTREAM is empty) in the downloads, fetched once.
deb() {
	found=$(ls "$downloads"/"$1"_"$2"*_amd64.deb 2>/dev/null | head -n1)
	if [ -z "$found" ]; then
		version=""
		for suite in $SUITES; do
			[ "$suite_ready" = "$suite" ] || apt_suite deb "$suite" || continue
			suite_ready=$suite
			version=$(apt_cache madison "$1" 2>/dev/null |
				awk -v v="$2" '{ gsub(/ /, "", $3) } v == "" || index($3, v "+") == 1 || index($3, v "-") == 1 { print $3; exit }')
			[ -n "$version" ] && break
		done
		if [ -z "$version" ]; then
			echo "fetch-sid-tools: $1 $2 is not in $SUITES" >&2
			exit 1
		fi
		(cd "$work" && apt_private download "$1=$version" >/dev/null) ||
			{ echo "fetch-sid-tools: could not download $1 $version" >&2; exit 1; }
		mv "$work"/"$1"_*.deb "$downloads/"
		found=$(ls "$downloads"/"$1"_"$2"*_amd64.deb | head -n1)
	fi
	echo "$found"
}

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/libc" "$dest/gpu" "$work/x" "$work/runc"
dpkg-deb -x "$(deb containerd "$CONTAINERD")" "$work/x"
dpkg-deb -x "$(deb checkpointctl "$CHECKPOINTCTL")" "$work/x"
for b in containerd ctr containerd-shim-runc-v2 checkpointctl; do
	install -m 755 "$work/x/usr/bin/$b" "$dest/bin/$b"
done
dpkg-deb -x "$(deb runc "$RUNC")" "$work/runc"
install -m 755 "$work/runc/usr/sbin/runc" "$dest/gpu/runc"
dpkg-deb -x "$(deb libc6 "")" "$work/libc"
cp -a "$work/libc/usr/lib/x86_64-linux-gnu/." "$dest/libc/"
"$dest/libc/ld-linux-x86-64.so.2" --library-path "$dest/libc" "$dest/bin/checkpointctl" --help >/dev/null
touch "$done_mark"
echo "fetch-sid-tools: $("$dest/bin/containerd" --version), checkpointctl $CHECKPOINTCTL, runc $RUNC (for the GPU machine)"
