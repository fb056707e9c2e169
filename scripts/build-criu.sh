#!/bin/sh
# Build CRIU (the criu binary, libcriu and the cuda plugin) from the verified
# upstream tarball into PREFIX. Does nothing when PREFIX is already complete.
#
# usage: build-criu.sh DOWNLOADDIR BUILDDIR PREFIX [stock]
# stock: upstream's CRIU without stasis's patches (the benchmark's reference).
set -eu

VERSION=4.2.1
downloads=$1
build=$2
prefix=$3

here=$(cd "$(dirname "$0")" && pwd)
# The patches stasis carries (each written to go upstream): a build made
# with another set is made again.
patch_files="$here"/criu-patches/*.patch
# Its kernel probe's cache in a folder of its own: upstream's CRIU on the
# same machine (the benchmark's reference) takes a cache of another build
# for stale and removes it.
rundir=RUNDIR=/run/stasis-criu
# The protections a runtime running this CRIU gets without asking (patch
# 0012's settings): ghost files only in folders of root's (patch 0008).
settings=DEFAULT_SETTINGS=CRIU_GHOST_ROOT_FOLDERS=1
[ "${4:-}" = stock ] && patch_files="" && rundir="" && settings=""
patches=$({ cat $patch_files /dev/null; printf %s "$rundir$settings"; } | sha256sum | cut -d' ' -f1)

if [ -x "$prefix/sbin/criu" ] && [ -f "$prefix/lib/libcriu.a" ] &&
	[ -f "$prefix/lib/criu/cuda_plugin.so" ] && [ -f "$prefix/include/criu/criu-plugin.h" ] &&
	[ -f "$prefix/images/stats.pb-c.c" ] && [ -f "$prefix/images/google/protobuf/descriptor.pb-c.c" ] &&
	[ "$(cat "$prefix/patches" 2>/dev/null)" = "$patches" ]; then
	exit 0
fi

"$here/fetch-criu.sh" "$downloads"

src="$build/criu-$VERSION"
rm -rf "$src"
mkdir -p "$build"
tar -xJf "$downloads/criu_$VERSION.orig.tar.xz" -C "$build"
for p in $patch_files; do
	patch -s -p1 -d "$src" <"$p" || { echo "build-criu: $p does not apply" >&2; exit 1; }
done

jobs=$(nproc 2>/dev/null || echo 2)
echo "build-criu: building CRIU $VERSION (criu, libcriu, cuda plugin)"
# CRIU's own Python helpers must not pick up a foreign interpreter's modules.
make -s -C "$src" -j"$jobs" PYTHON=/usr/bin/python3 $rundir $settings criu lib/c/libcriu.a >"$build/criu-build.log" 2>&1 ||
	{ tail -n 30 "$build/criu-build.log" >&2; exit 1; }
# The plugin only builds from the top level (its own folder lacks the config).
make -s -C "$src" -j"$jobs" PYTHON=/usr/bin/python3 $rundir $settings cuda_plugin >>"$build/criu-build.log" 2>&1 ||
	{ tail -n 30 "$build/criu-build.log" >&2; exit 1; }

mkdir -p "$prefix/sbin" "$prefix/lib/criu" "$prefix/include/criu"
install -m 755 "$src/criu/criu" "$prefix/sbin/criu"
install -m 644 "$src/lib/c/libcriu.a" "$prefix/lib/libcriu.a"
install -m 644 "$src/lib/c/criu.h" "$src/criu/include/version.h" \
	"$src/images/rpc.pb-c.h" "$src/criu/include/criu-plugin.h" "$prefix/include/criu/"
install -m 755 "$src/plugins/cuda/cuda_plugin.so" "$prefix/lib/criu/cuda_plugin.so"
# The protobuf-c code CRIU's build generated from its image formats
# (images/*.proto): stasis decodes CRIU's statistics, process tree, files
# and sockets with it (criu-images.c).
rm -rf "$prefix/images"
mkdir -p "$prefix/images/google/protobuf"
install -m 644 "$src"/images/*.pb-c.c "$src"/images/*.pb-c.h "$prefix/images/"
install -m 644 "$src"/images/google/protobuf/descriptor.pb-c.c \
	"$src"/images/google/protobuf/descriptor.pb-c.h "$prefix/images/google/protobuf/"
echo "$patches" >"$prefix/patches"
echo "build-criu: installed into $prefix"
