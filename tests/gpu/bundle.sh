# shellcheck shell=bash
# GPU containers for the GPU suite (tests/gpu/run) and the migration
# benchmark (bench/migrate), sourced by both: runc bundles whose rootfs is
# the host's, read-only. Needs B (the GPU bundle's folder) and S (stasis).

# gpu_bundle DIR ARGS...: a bundle running ARGS, with the GPU edits, the
# host's filesystem as its read-only root, DIR/work and the GPU bundle
# bound in, and the host's network (no iptables needed to lock it).
gpu_bundle() {
	local d=$1; shift
	mkdir -p "$d/b/rootfs" "$d/work"
	mount --bind / "$d/b/rootfs" || return 1
	# Private, so that no mount made later under / propagates into it and
	# keeps it from unmounting.
	mount --make-private "$d/b/rootfs" && (cd "$d/b" && runc spec) || { umount "$d/b/rootfs"; return 1; }
	python3 - "$d/b/config.json" "$d/work" "$B" "$@" <<'PY' || { umount "$d/b/rootfs"; return 1; }
import json, sys
path, work, bundle, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
c = json.load(open(path))
c["process"]["terminal"] = False
c["process"]["args"] = args
c["root"] = {"path": "rootfs", "readonly": True}
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
c["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]})
c["process"]["env"].append("HOME=/tmp")
for src in (work, bundle):
    c["mounts"].append({"destination": src, "type": "bind", "source": src, "options": ["rbind", "rw"]})
json.dump(c, open(path, "w"), indent=1)
PY
	"$S" oci gpu-spec "$d/b/config.json" --gpus "${BUNDLE_GPUS:-0}" || { umount "$d/b/rootfs"; return 1; }
	# Then read-only, so that nothing (a cleanup's rm -rf of the suite's
	# folder above all) can reach the host's files through it if it stays
	# mounted; the bind mounts' mount points first, as runc would make them
	# (under the host's own mount points, such as the driver's folder).
	python3 - "$d/b/config.json" "$d/b/rootfs" <<'PY' && mount -o remount,bind,ro "$d/b/rootfs" || { umount "$d/b/rootfs"; return 1; }
import json, os, sys
c, root = json.load(open(sys.argv[1])), sys.argv[2]
for m in c["mounts"]:
    opts = m.get("options", [])
    if m.get("type") != "bind" and "bind" not in opts and "rbind" not in opts:
        continue
    dst = root + m["destination"]
    if os.path.lexists(dst) or m["destination"].startswith(("/tmp/", "/dev/", "/proc/", "/sys/")):
        continue
    if os.path.isdir(m["source"]):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
PY
}
gpu_bundle_done() { runc delete --force "$1" 2>/dev/null; umount "$2/b/rootfs" 2>/dev/null; }
ctr_running() { runc state "$1" 2>/dev/null | grep -q '"status": "running"'; }

# netns_runc DIR: DIR/runc, a runc whose restores run in a network namespace
# of their own. A migration's copy comes up on the source's host in these
# tests, beside the frozen source, and the two would share one network
# namespace (the bundles have none of their own): the CUDA driver's
# listening socket, named in the abstract namespace after the process's PID
# namespace and PID (@cuda-uvmfd-INO-PID@), is held by the source there and
# CRIU could not bind it again for the copy. Between two hosts it is free.
netns_runc() {
	local real; real=$(command -v runc)
	mkdir -p "$1"
	# Its loopback up: CRIU's restore probes TCP repair on it.
	cat >"$1/lo-up" <<'EOP'
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0))[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))
EOP
	cat >"$1/runc" <<EOR
#!/bin/bash
for a; do
	[ "\$a" = restore ] && exec unshare -n bash -c 'env -u LD_LIBRARY_PATH python3 "$1/lo-up" && exec "\$0" "\$@"' "$real" "\$@"
done
exec "$real" "\$@"
EOR
	chmod +x "$1/runc"
}
