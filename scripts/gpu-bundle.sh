#!/bin/sh
# Gather everything a GPU run needs into .gpu/ (ignored by git, carried to the
# device): stasis and its cuda-checkpoint link, runc, CRIU with its cuda plugin,
# every shared library they link against except libc and the loader, and the
# GPU workloads built for Hopper.
# usage: gpu-bundle.sh BUILD_DIR
set -eu
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.gpu"
rm -rf "$out"
mkdir -p "$out/bench" "$out/bin" "$out/criu/sbin" "$out/criu/lib/criu" "$out/lib/stasis/criu" "$out/tests"
cp "$build/bin/stasis" "$out/bin/"
ln -s stasis "$out/bin/cuda-checkpoint"
cp "$build/lib/stasis/criu/"*.so "$out/lib/stasis/criu/"
cp "$build/lib/stasis/"*.so "$out/lib/stasis/"
cp "$build/criu/sbin/criu" "$out/criu/sbin/"
cp "$build/criu/lib/criu/cuda_plugin.so" "$out/criu/lib/criu/"
cp "$(command -v runc)" "$out/bin/runc"
# NVIDIA's own cuda-checkpoint for the benchmark's reference pipeline, when
# STASIS_REF_CUDA_CHECKPOINT names it (never part of the repository), with
# upstream's CRIU and cuda plugin, built without the patches stasis carries.
if [ -n "${STASIS_REF_CUDA_CHECKPOINT:-}" ]; then
	mkdir -p "$out/ref/lib/criu"
	cp "$STASIS_REF_CUDA_CHECKPOINT" "$out/ref/cuda-checkpoint"
	"$root/scripts/build-criu.sh" "$build/downloads" "$build/criu-stock-build" "$build/criu-stock" stock
	cp "$build/criu-stock/sbin/criu" "$out/ref/criu"
	cp "$build/criu-stock/lib/criu/cuda_plugin.so" "$out/ref/lib/criu/"
fi
# A second stasis for the benchmark's old and zold pipelines, when
# STASIS_OLD_BUILD names another build folder (an earlier commit's), to
# measure a change side by side in one run; it finds the bundle's CRIU
# through old/criu, which bench/run links.
if [ -n "${STASIS_OLD_BUILD:-}" ]; then
	mkdir -p "$out/old/bin" "$out/old/lib/stasis/criu"
	cp "$STASIS_OLD_BUILD/bin/stasis" "$out/old/bin/"
	cp "$STASIS_OLD_BUILD/lib/stasis/criu/"*.so "$out/old/lib/stasis/criu/"
fi
# The runtimes' parts, GPU_BUNDLE_RUNTIMES of "containerd" (the default)
# and "podman": both together are over the carry limit.
runtimes=${GPU_BUNDLE_RUNTIMES:-containerd}
# containerd for the containerd tests, compressed for the carry limit;
# tests/gpu/run unpacks it into bin/: 2.1 (fetch-sid-tools.sh), as current
# distributions run it, where make fetched it (CI runs bookworm's 1.6 too),
# and the CRI tests' client, pause and registry.
case " $runtimes " in *" containerd "*)
	containerd_dir=$(dirname "$(command -v containerd)")
	[ -x "$build/sid/bin/containerd" ] && containerd_dir="$build/sid/bin"
	tar -cf - -C "$containerd_dir" containerd ctr containerd-shim-runc-v2 |
		xz -T0 -6 >"$out/containerd.tar.xz"
	[ -x "$build/bin/cri-client" ] && cp "$build/bin/cri-client" "$out/bin/" && xz -T0 -9 "$out/bin/cri-client"
	[ -x "$build/bin/cri-pause" ] && cp "$build/bin/cri-pause" "$out/bin/"
	;;
esac
# podman 5.8 with its conmon, runc and C library, from the Debian unstable
# root that make check builds (podman-kit.sh), unpacked by the test at
# the prefix it was made for.
case " $runtimes " in *" podman "*)
	"$root/scripts/podman-kit.sh" "$build/sid-root" /tmp/stasis-gpu-podman "$out/podman-kit.tar.xz"
	;;
esac
cp "$root/tests/tools/oci-registry.py" "$out/tests/"
# runc 1.3 (fetch-sid-tools.sh), for the runtimes' own commands
# (t_runc13_own_commands): it needs glibc 2.38, which the GPU machine has.
[ -x "$build/sid/gpu/runc" ] && xz -T0 -9 -c "$build/sid/gpu/runc" >"$out/bin/runc-1.3.xz"
# zstd and zstat: how far the images compress (bench/run).
cp "$(command -v zstd)" "$out/bin/zstd"
cc -O2 -o "$out/bench/zstat" "$root/bench/zstat.c" -lzstd
for bin in "$out/bin/stasis" "$out/bin/runc" "$out/bin/zstd" "$out/bench/zstat" "$out/criu/sbin/criu" "$out/criu/lib/criu/cuda_plugin.so"; do
	ldd "$bin" | awk '/=> \// { print $3 }' | while read -r lib; do
		case $(basename "$lib") in
		libc.so.* | ld-linux*.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.*) ;;
		*) cp -L "$lib" "$out/lib/" ;;
		esac
	done
done
# No debugging symbols on the device (the carry limit): backtraces there
# name functions still.
find "$out/bin" "$out/criu" "$out/old" "$out/ref" -type f 2>/dev/null | while read -r f; do
	case $(head -c 4 "$f" | od -An -c | tr -d ' ') in '177ELF') strip --strip-debug "$f" ;; esac
done
# The bundle's programs find its libraries by themselves: runtimes run
# CRIU (and CRIU stasis's GPU helper) with an environment of their own
# making, without LD_LIBRARY_PATH (podman passes PATH alone). DT_RPATH,
# not RUNPATH, as it serves the libraries' own dependencies and the
# plugins CRIU loads too.
patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$out/bin/stasis"
patchelf --force-rpath --set-rpath '$ORIGIN/../../lib' "$out/criu/sbin/criu"
[ -e "$out/ref/criu" ] && patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$out/ref/criu"
[ -e "$out/old/bin/stasis" ] && patchelf --force-rpath --set-rpath '$ORIGIN/../../lib' "$out/old/bin/stasis"
# Libraries over 1 MiB (ICU's data, which libarchive's libxml2 needs, above all), runc
# and the CRI client go compressed, for the device's carry limit; every entry script
# unpacks them.
find "$out/lib" -maxdepth 1 -name '*.so*' -size +1M -exec xz -T0 -6 {} \;
xz -T0 -6 "$out/bin/runc"
nvcc -O2 -arch=sm_90 -o "$out/tests/probe" "$root/tests/gpu/probe.cu"
nvcc -O2 -arch=sm_90 -o "$out/tests/peer-probe" "$root/tests/gpu/peer-probe.cu"
cp "$root/tests/gpu/train.py" "$root/tests/gpu/run" "$root/tests/gpu/bundle.sh" "$root/tests/gpu/clean" "$root/tests/gpu/watch" "$out/tests/"
mkdir -p "$out/tests/frameworks"
cp "$root"/tests/gpu/frameworks/*.py "$root/tests/gpu/frameworks/run" "$root/tests/gpu/frameworks/nccl-speed" "$root/tests/gpu/frameworks/step-rates" "$out/tests/frameworks/"
nvcc -O2 -arch=sm_90 -o "$out/bench/bw" "$root/bench/bw.cu"
cc -O2 -pthread -o "$out/bench/tcpcopy" "$root/bench/tcpcopy.c"
cp "$root/bench/run" "$root/bench/migrate" "$root/bench/cold-start" "$root/bench/table" "$root/bench/criu-stats" "$out/bench/"
du -sh "$out"
