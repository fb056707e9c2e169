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

# fetch PACKAGE UPSTREAM: apt_fetch's, from this script's suites.
fetch() { apt_fetch "$downloads" "$1" "$2" "$SUITES"; }

# Everything fetched and unpacked first: checkpointctl, make's target, is
# installed last.
rm -rf "$dest"
mkdir -p "$work/x" "$work/runc" "$work/libc"
fetch containerd "$CONTAINERD"
dpkg-deb -x "$deb" "$work/x"
fetch checkpointctl "$CHECKPOINTCTL"
dpkg-deb -x "$deb" "$work/x"
fetch runc "$RUNC"
dpkg-deb -x "$deb" "$work/runc"
fetch libc6 ""
dpkg-deb -x "$deb" "$work/libc"
"$work/libc/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path \
	"$work/libc/usr/lib/x86_64-linux-gnu" "$work/x/usr/bin/checkpointctl" --help >/dev/null
mkdir -p "$dest/bin" "$dest/libc" "$dest/gpu"
cp -a "$work/libc/usr/lib/x86_64-linux-gnu/." "$dest/libc/"
install -m 755 "$work/runc/usr/sbin/runc" "$dest/gpu/runc"
for b in containerd ctr containerd-shim-runc-v2 checkpointctl; do
	install -m 755 "$work/x/usr/bin/$b" "$dest/bin/$b"
done
touch "$done_mark"
echo "fetch-sid-tools: $("$dest/bin/containerd" --version), checkpointctl $CHECKPOINTCTL, runc $RUNC (for the GPU machine)"
