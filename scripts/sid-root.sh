#!/bin/sh
# A root of Debian unstable with podman 5.8 (and conmon, runc 1.3,
# netavark) for the e2e tests of podman's own checkpoint and restore: its
# binaries need a newer glibc than bookworm's (podman's libsubid.so.6
# needs 2.43), so they run in that root (tests/e2e/sid-enter.sh), not on
# bookworm. debootstrap checks the packages against the suite's signed
# index with Debian's archive key, from the mirror the machine's apt uses
# (apt-private.sh); its .debs are kept in DOWNLOADDIR.
#
# usage: sid-root.sh DOWNLOADDIR DEST
set -eu

PACKAGES=podman,conmon,runc,netavark
downloads=$1
dest=$2
done_mark="$dest/.stasis-root"
[ "$(cat "$done_mark" 2>/dev/null)" = "$PACKAGES" ] && exit 0

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=apt-private.sh
. "$here/apt-private.sh"

mkdir -p "$downloads/debootstrap"
downloads=$(cd "$downloads/debootstrap" && pwd)
rm -rf "$dest"
mkdir -p "$dest"
if ! debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$downloads" \
	--keyring="$keyring" sid "$dest" "$mirror" >"$work/debootstrap.log" 2>&1; then
	echo "sid-root: debootstrap failed: $(tail -n 3 "$work/debootstrap.log")" >&2
	exit 1
fi
echo "$PACKAGES" >"$done_mark"
echo "sid-root: $dest"
