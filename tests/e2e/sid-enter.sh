#!/bin/sh
# sid-enter.sh ROOT CMD...: CMD in ROOT (scripts/sid-root.sh) as its root,
# in a mount namespace of its own (pivot_root, not chroot: CRIU wants its
# root to be a mount), with /proc, /sys and /dev of the host and a /run of
# its own. What CMD starts and leaves running keeps that namespace.
root=$1
shift
exec unshare --mount --propagation private sh -c '
R=$0
mount --bind "$R" "$R" && mount -t proc proc "$R/proc" && mount --rbind /sys "$R/sys" &&
	mount --rbind /dev "$R/dev" && mount -t tmpfs -o mode=755 tmpfs "$R/run" && mkdir -p "$R/.old" &&
	cd "$R" && pivot_root . .old && umount -l /.old || exit 1
exec chroot / "$@"' "$root" "$@"
