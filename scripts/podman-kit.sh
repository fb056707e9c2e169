#!/bin/sh
# podman 5.8, conmon and runc 1.3 from the Debian unstable root (sid-root.sh), made
# to run on a machine whose C library is older than theirs (the GPU
# machine's has 2.39, podman's libsubid needs 2.43): each binary gets the
# root's loader as its interpreter and the kit's library folder as its
# DT_RPATH (which, unlike RUNPATH, also serves the libraries' own
# dependencies), so it loads only the libraries it was built with. The
# loader's path is absolute, so the kit works only unpacked at PREFIX.
# podman runs itself again through /proc/self/exe (containers/storage's
# untar), which is why the binaries are patched rather than started
# through the loader (runc too, for its init). netavark comes too: podman
# looks for it at every start, whatever the container's network. The
# kit's containers.conf names them; CRIU and the images are the caller's.
#
# usage: podman-kit.sh SID_ROOT PREFIX OUT.tar.xz
set -eu
root=$1
prefix=$2
out=$3
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
kit="$stage/${prefix#/}"
mkdir -p "$kit/bin" "$kit/lib" "$kit/etc"

bins="/usr/bin/podman /usr/bin/conmon /usr/sbin/runc /usr/lib/podman/netavark"
for bin in $bins; do
	cp "$root$bin" "$kit/bin/"
	chroot "$root" ldd "$bin" | awk '/=> \// { print $3 }'
done | sort -u | while read -r lib; do
	cp -L "$root$lib" "$kit/lib/"
done
loader=$(chroot "$root" ldd /usr/bin/podman | awk '/ld-linux/ { print $1 }')
cp -L "$root$loader" "$kit/lib/"
for bin in $bins; do
	bin=$(basename "$bin")
	patchelf --set-interpreter "$prefix/lib/$(basename "$loader")" \
		--force-rpath --set-rpath "$prefix/lib" "$kit/bin/$bin"
done
# podman reads its image policy from $HOME/.config/containers or /etc
# (no option names it): the caller runs it with HOME=PREFIX/home.
mkdir -p "$kit/home/.config/containers"
cp "$root/etc/containers/policy.json" "$kit/home/.config/containers/"
cp "$root/usr/share/containers/seccomp.json" "$kit/etc/"
cat >"$kit/etc/containers.conf" <<EOF
[containers]
seccomp_profile = "$prefix/etc/seccomp.json"
[engine]
conmon_path = ["$prefix/bin/conmon"]
helper_binaries_dir = ["$prefix/bin"]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
[engine.runtimes]
runc = ["$prefix/bin/runc"]
EOF
tar -cf - -C "$stage" "${prefix#/}" | xz -T0 -9 >"$out"
