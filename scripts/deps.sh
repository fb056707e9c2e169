#!/bin/sh
# Install the Debian packages stasis needs to build and test, skipping the
# ones already present so that a second run costs nothing.
set -eu

# python3-yaml and procps: CRIU's own test harness, zdtm.py (make zdtm).
# libfuse3, libarchive, libmount and libmnl: the image's FUSE server, a
# container's file system diff, mount tables and sock_diag. debootstrap:
# the root of Debian unstable that the podman tests run in (sid-root.sh).
# patchelf: the GPU bundle's binaries find its libraries themselves
# (gpu-bundle.sh, podman-kit.sh).
PACKAGES="build-essential pkg-config xz-utils ca-certificates \
libcmocka-dev libjson-c-dev libxxhash-dev libzstd-dev \
libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler \
python3-protobuf libnl-3-dev libnet1-dev libcap-dev libbsd-dev \
libnftables-dev libgnutls28-dev uuid-dev libaio-dev iptables \
runc containerd busybox-static clang-format criu util-linux patch \
python3-yaml procps libfuse3-dev libarchive-dev libmount-dev libmnl-dev \
debootstrap patchelf"

missing=""
for pkg in $PACKAGES; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
	[ "$status" = "installed" ] || missing="$missing $pkg"
done

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "stasis: missing packages:$missing; run as root or install them" >&2
	exit 1
fi

echo "stasis: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
