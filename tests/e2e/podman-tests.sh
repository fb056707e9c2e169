# shellcheck shell=bash
# podman 5.8's own checkpoint and restore, sourced by run: Debian unstable's
# podman, conmon and runc 1.3 in a root of their own (scripts/sid-root.sh:
# they need a newer glibc than bookworm's), entered with sid-enter.sh, and
# stasis's CRIU installed in it as the machine's criu, with its plugin.

SID_ROOT="$BUILD/sid-root"

# sid_install_criu: stasis's CRIU in the root as /usr/local/sbin/criu,
# first on PATH as make install puts it, with the libraries it was built
# with (bookworm's, beside the root's newer C library) and its plugin
# loaded; each run's arguments go to /e2e/criu-calls (the checkpoint's
# moved to criu-calls.dump).
sid_install_criu() {
	local o="$SID_ROOT/opt/stasis"
	rm -rf "$o" && mkdir -p "$o/lib/stasis/criu" "$o/sbin" || return 1
	cp "$BUILD/criu/sbin/criu" "$o/sbin/" && cp "$BUILD/lib/stasis/criu/stasis_nvidia.so" "$o/lib/stasis/criu/" || return 1
	ldd "$BUILD/criu/sbin/criu" | awk '/=> \// { print $3 }' | grep -v '/libc\.so\|/ld-linux' |
		while read -r lib; do cp -L "$lib" "$o/lib/"; done
	printf 'libdir "/opt/stasis/lib/stasis/criu"\n' >"$o/criu.conf"
	printf '#!/bin/sh\necho "$*" >>/e2e/criu-calls\nCRIU_CONFIG_FILE=/opt/stasis/criu.conf LD_LIBRARY_PATH=/opt/stasis/lib exec /opt/stasis/sbin/criu "$@"\n' \
		>"$SID_ROOT/usr/local/sbin/criu"
	chmod +x "$SID_ROOT/usr/local/sbin/criu"
}

sid_cleanup() {
	rm -rf "${SID_ROOT:?}/e2e" "$SID_ROOT/opt/stasis" "$SID_ROOT/usr/local/sbin/criu"
}

# The session in the root: podman runs the image container (the workload
# of the containerd tests), checkpoints it into an archive (--export, the
# container stops), removes it, restores it from the archive (--import);
# it writes the PIDs it got to /e2e/pids, waits for /e2e/done, and removes
# everything. Its storage lives in /e2e.
PODMAN_FLOW='set -u
P="podman --runtime runc --cgroup-manager cgroupfs --events-backend file --root /e2e/storage --runroot /e2e/run"
say() { echo "$*" >>/e2e/pids; }
pid() { $P inspect -f "{{.State.Pid}}" c1; }
$P load -i /e2e/image.tar >/dev/null || { say fail load; exit 1; }
$P run -d --network host --name c1 stasis.test/busybox:e2e /bin/sh -c "$(cat /e2e/script)" >/dev/null || { say fail run; exit 1; }
say running "$(pid)"
while [ ! -e /e2e/go ]; do sleep 0.05; done
$P container checkpoint --keep --export /e2e/checkpoint.tar --compress none c1 >/dev/null 2>/e2e/err || { say fail checkpoint; exit 1; }
find /e2e/storage /e2e/run -name "dump*.log" >/e2e/logs-found; cp "$(head -n1 /e2e/logs-found)" /e2e/dump.log
mv /e2e/criu-calls /e2e/criu-calls.dump
say checkpointed
$P rm -f c1 >/dev/null
$P container restore --import /e2e/checkpoint.tar >/dev/null 2>/e2e/err || { say fail restore; exit 1; }
say restored "$(pid)"
while [ ! -e /e2e/done ]; do sleep 0.05; done
$P rm -af -t 0 >/dev/null 2>&1; $P rmi -af >/dev/null 2>&1
say gone'

# podman_wait WORD: until the session writes a line that starts with WORD
# (a minute at most, or until it fails); the rest of that line on stdout.
podman_wait() {
	local line
	for _ in $(seq 600); do
		line=$(grep -m1 "^$1\( \|$\)" "$SID_ROOT/e2e/pids" 2>/dev/null) && { echo "${line#"$1" }"; return 0; }
		grep -q "^fail" "$SID_ROOT/e2e/pids" 2>/dev/null && return 1
		sleep 0.1
	done
	return 1
}

# podman_image_files ROOT: check_image_files's, but for the folder the
# workload deleted and made again (/data/sub): podman's restore unpacks its
# rootfs diff, then removes what its deleted.files lists, that folder
# among them, with the file made in it. podman's own doing (its archive
# has both), with any CRIU.
podman_image_files() {
	[ "$(cat "$1/new-file" 2>/dev/null)" = new ] || { fail "/new-file: $(ls -la "$1")"; return 1; }
	[ "$(cat "$1/etc/motd")" = changed ] || { fail "/etc/motd: $(cat "$1/etc/motd")"; return 1; }
	[ ! -e "$1/etc/remove-me" ] || { fail "/etc/remove-me is back"; return 1; }
	[ ! -e "$1/data/sub/old" ] || { fail "/data/sub/old is back"; return 1; }
}

# podman 5.8.6's `podman container checkpoint --export` and `podman
# container restore --import` of a container whose workload changes its
# image's files, with stasis's CRIU as the root's criu and no stasis
# command: every CRIU run went through stasis's, with the plugin loaded
# (which leaves a tree without GPU to CRIU's own freeze); the archive has
# checkpointctl's layout; the restored container counts on from the
# checkpoint with its files as they were then.
test_podman_own_commands() {
	local d="$SID_ROOT/e2e" pid at root r=0
	[ -x "$SID_ROOT/usr/bin/podman" ] || { fail "no podman root in $SID_ROOT (make check makes it)"; return 1; }
	sid_cleanup && mkdir -p "$d" && sid_install_criu || { fail "installing stasis's CRIU in the root"; return 1; }
	make_oci_image "$d/image.tar" stasis.test/busybox:e2e || return 1
	printf '%s' "$IMAGE_SCRIPT" >"$d/script"
	printf '%s\n' "$PODMAN_FLOW" >"$d/flow"
	"$(dirname "$0")/sid-enter.sh" "$SID_ROOT" /bin/sh /e2e/flow >"$TMP/podman-flow.log" 2>&1 &
	PIDS+=("$!")
	pid=$(podman_wait running) || r=1
	[ $r = 0 ] && root="/proc/$pid/root"
	[ $r = 0 ] && { wait_counter "$root" 5 || { fail "the container does not count"; r=1; }; }
	touch "$d/go"
	[ $r = 0 ] && { podman_wait checkpointed >/dev/null || { fail "podman's checkpoint failed: $(cat "$d/err")"; r=1; }; }
	[ $r = 0 ] && { grep -q . "$d/criu-calls.dump" || { fail "podman's runc ran no criu of PATH's"; r=1; }; }
	[ $r = 0 ] && for f in checkpoint/ config.dump spec.dump rootfs-diff.tar; do
		tar -tf "$d/checkpoint.tar" | grep -q "^\(\./\)\?$f" || { fail "$f not in podman's archive: $(tar -tf "$d/checkpoint.tar" | head)"; r=1; }
	done
	# (CRIU's log stays in podman's folder of the container.)
	[ $r = 0 ] && { grep -q "stasis: no process of the tree of PID [0-9]* uses the GPU" "$d/dump.log" ||
		{ fail "stasis's plugin is not in CRIU's log: $(grep -i 'plugin\|stasis' "$d/dump.log")"; r=1; }; }
	[ $r = 0 ] && { pid=$(podman_wait restored) || { fail "podman's restore failed: $(cat "$d/err")"; r=1; }; }
	[ $r = 0 ] && { grep -q . "$d/criu-calls" || { fail "the restore ran no criu of PATH's"; r=1; }; }
	if [ $r = 0 ]; then
		root="/proc/$pid/root"
		at=$(counter "$root")
		wait_counter "$root" $((at + 10)) || { fail "the restored container does not count"; r=1; }
		[ $r = 0 ] && { podman_image_files "$root" && log_is_continuous "$root" || r=1; }
	fi
	touch "$d/done"
	podman_wait gone >/dev/null || { fail "the session did not end: $(tail -3 "$TMP/podman-flow.log")"; r=1; }
	[ -n "${E2E_KEEP_SID:-}" ] || sid_cleanup
	return $r
}
