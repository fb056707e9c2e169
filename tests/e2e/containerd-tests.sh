# shellcheck shell=bash
# containerd containers, sourced by run: a real containerd with its own
# root, state and socket under TMP, started on first use and stopped at the
# end; busybox containers from a root folder (ctr run --rootfs), counting
# inside it as make_bundle's do.

CTRD="$TMP/containerd"
CTRD_NS="stasis-e2e-$$"
export CONTAINERD_ADDRESS="$CTRD/state/containerd.sock"

ctrd() { ctr --namespace "$CTRD_NS" "$@"; }

# Start containerd (again, after a stop) on TMP's socket.
containerd_start() {
	mkdir -p "$CTRD"
	cat >"$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CTRD/state/containerd.sock"
[ttrpc]
  address = "$CTRD/state/containerd.sock.ttrpc"
EOF
	# containerd leaves a checkpoint's temporary copy in its TMPDIR.
	mkdir -p "$CTRD/tmp"
	TMPDIR="$CTRD/tmp" containerd -c "$CTRD/config.toml" >>"$CTRD/containerd.log" 2>&1 &
	echo $! >"$CTRD/pid"
	PIDS+=("$(cat "$CTRD/pid")")
	for _ in $(seq 100); do
		ctr version >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	fail "containerd did not start: $(tail -3 "$CTRD/containerd.log")"
}

containerd_stop() {
	local p
	p=$(cat "$CTRD/pid" 2>/dev/null) || return 0
	kill "$p" 2>/dev/null
	for _ in $(seq 100); do [ -e "/proc/$p" ] || break; sleep 0.05; done
	rm -f "$CTRD/pid"
}

containerd_ready() { [ -s "$CTRD/pid" ] && ctr version >/dev/null 2>&1 || containerd_start; }

# Every container of namespace NS (default: the tests') gone, with the
# runc links stasis made for them.
ctrd_remove_all() {
	local ns=${1:-$CTRD_NS}
	for id in $(ctr -n "$ns" containers ls -q 2>/dev/null); do
		ctr -n "$ns" tasks kill -s SIGKILL "$id" >/dev/null 2>&1
		for _ in $(seq 50); do ctr -n "$ns" tasks ls | grep -q "^$id .*RUNNING" || break; sleep 0.05; done
		ctr -n "$ns" tasks delete -f "$id" >/dev/null 2>&1
		ctr -n "$ns" containers delete "$id" >/dev/null 2>&1
	done
	rm -rf "${STASIS_RUN_DIR:?}/containerd/$ns"
	rmdir "$STASIS_RUN_DIR/containerd" 2>/dev/null
	return 0
}

# Every container gone, containerd stopped, the cgroups runc leaves behind
# removed (called from cleanup).
containerd_cleanup() {
	[ -d "$CTRD" ] || return 0
	ctrd_remove_all
	ctrd_remove_all "$CTRD_NS-b"
	containerd_stop
	for cg in /sys/fs/cgroup/*/"$CTRD_NS" /sys/fs/cgroup/"$CTRD_NS"; do
		[ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rm -rf "${STASIS_RUN_DIR:?}/containerd"
}

# make_rootfs DIR: busybox and a counter script in a root folder.
make_rootfs() {
	mkdir -p "$1/bin" "$1/proc" "$1/sys" "$1/dev" "$1/tmp"
	cp "$(command -v busybox)" "$1/bin/"
	for a in sh sleep mv; do ln -sf busybox "$1/bin/$a"; done
}

# It appends its count to /state (see make_bundle).
COUNTER_SCRIPT='i=0; while :; do i=$((i+1)); echo $i >> /state; echo tick $i >> /log; sleep 0.02; done'

# ctrd_start ID ROOTFS: a running container that counts.
ctrd_start() {
	containerd_ready || return 1
	ctrd run -d --null-io --rootfs "$2" "$1" /bin/sh -c "$COUNTER_SCRIPT" >/dev/null || return 1
	wait_counter "$2" 5
}

ctrd_task() { ctrd tasks ls | awk -v id="$1" '$1 == id { print $2, $3 }'; }

test_containerd_checkpoint_restore() {
	local d="$TMP/cd1" id="cd1" at before after
	make_rootfs "$d/r" && ctrd_start "$id" "$d/r" || return 1
	before=$(ctrd_task "$id" | cut -d' ' -f1)
	"$STASIS" ps | grep -q "^$CTRD_NS/$id .*containerd running" || { fail "ps: $("$STASIS" ps)"; return 1; }
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" --print-stats >"$d/stats" || return 1
	grep -q '"runc_checkpoint"' "$d/stats" || return 1
	[ -z "$(ctrd_task "$id")" ] || { fail "the task is still there: $(ctrd tasks ls)"; return 1; }
	ctrd containers ls -q | grep -qx "$id" && { fail "the container is still there"; return 1; }
	at=$(counter "$d/r")
	sleep 0.3
	[ "$(counter "$d/r")" = "$at" ] || { fail "counter moved after checkpoint"; return 1; }
	"$STASIS" inspect "$d/img" | grep -q "container    containerd '$id'" || { fail "inspect: $("$STASIS" inspect "$d/img")"; return 1; }
	"$STASIS" restore --runtime containerd -D "$d/img" >"$d/out" || return 1
	after=$(ctrd_task "$id")
	[ "$after" = "$(cat "$d/out") RUNNING" ] || { fail "ctr task ls: '$after', stasis printed $(cat "$d/out")"; return 1; }
	[ "${after%% *}" != "$before" ] || { fail "the same PID as before"; return 1; }
	wait_counter "$d/r" $((at + 10)) || { fail "the restored container does not count"; return 1; }
	"$STASIS" ps | grep -q "^$CTRD_NS/$id .*containerd running" || { fail "ps after restore: $("$STASIS" ps)"; return 1; }
	# containerd owns it: its exit status reaches containerd.
	ctrd tasks kill -s SIGKILL "$id" || return 1
	for _ in $(seq 100); do ctrd_task "$id" | grep -q STOPPED && break; sleep 0.05; done
	ctrd tasks delete "$id" 2>&1 | grep -q "exit code 137" || { fail "no exit status from the restored task"; return 1; }
	ctrd containers delete "$id" || return 1
	log_is_continuous "$d/r" || return 1
	# Again from the same image, under another name.
	"$STASIS" restore --runtime containerd -D "$d/img" --name "$id-2" >/dev/null || return 1
	ctrd_task "$id-2" | grep -q RUNNING || { fail "$id-2: $(ctrd tasks ls)"; return 1; }
	ctrd_remove_all
}

# --leave-running, then containerd restarted before a restore under a new
# name into another namespace.
test_containerd_leave_running_restart() {
	local d="$TMP/cd2" id="cd2" at before
	make_rootfs "$d/r" && ctrd_start "$id" "$d/r" || return 1
	before=$(ctrd_task "$id")
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" --leave-running || return 1
	[ "$(ctrd_task "$id")" = "$before" ] || { fail "task changed: $(ctrd_task "$id"), was $before"; return 1; }
	at=$(counter "$d/r")
	wait_counter "$d/r" $((at + 10)) || { fail "it stopped counting"; return 1; }
	ctrd tasks kill -s SIGKILL "$id" && sleep 0.2 && ctrd tasks delete "$id" >/dev/null 2>&1
	ctrd containers delete "$id" || return 1
	containerd_stop && containerd_start || return 1
	"$STASIS" restore --runtime containerd --namespace "$CTRD_NS-b" -D "$d/img" --name "$id-b" >/dev/null || return 1
	ctr -n "$CTRD_NS-b" tasks ls | grep -q "^$id-b .*RUNNING" || { fail "$(ctr -n "$CTRD_NS-b" tasks ls)"; return 1; }
	wait_counter "$d/r" $((at + 20)) || { fail "the restored container does not count"; return 1; }
	ctrd_remove_all "$CTRD_NS-b"
}

test_containerd_bad_input() {
	local d="$TMP/cd3" id="cd3"
	make_rootfs "$d/r" && containerd_ready || return 1
	expect_error "no container 'nope' in containerd's namespace '$CTRD_NS'" "$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" nope -D "$d/x" || return 1
	expect_error "in containerd's namespace 'no-such-ns'" "$STASIS" checkpoint --runtime containerd --namespace no-such-ns "$id" -D "$d/x" || return 1
	expect_error "containerd does not answer at $d/none.sock" "$STASIS" checkpoint --runtime containerd --address "$d/none.sock" "$id" -D "$d/x" || return 1
	[ ! -e "$d/x" ] || { fail "a bad checkpoint created its folder"; return 1; }
	ctrd containers create --rootfs "$d/r" "$id" /bin/sleep 100 || return 1
	expect_error "container '$id' is not running (it is created)" "$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/x" || return 1
	ctrd containers delete "$id" && ctrd_start "$id" "$d/r" || return 1
	# A fault mid-way leaves the container running under containerd.
	for f in criu-dump sigterm-before-dump; do
		CONTAINERD_NAMESPACE=$CTRD_NS STASIS_FAULT=$f "$STASIS" checkpoint --runtime containerd "$id" -D "$d/f-$f" 2>/dev/null && { fail "$f: succeeded"; return 1; }
		ctrd_task "$id" | grep -q RUNNING || { fail "$f: not running: $(ctrd tasks ls)"; return 1; }
	done
	# A manifest that cannot be written: the container comes back from the image.
	STASIS_FAULT=manifest "$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/fm" 2>"$d/err" && { fail "manifest fault: succeeded"; return 1; }
	grep -q "was restored from the image just written" "$d/err" || { fail "$(cat "$d/err")"; return 1; }
	ctrd_task "$id" | grep -q RUNNING || { fail "manifest fault: not running: $(ctrd tasks ls)"; return 1; }
	[ -L "$STASIS_RUN_DIR/containerd/$CTRD_NS/$id/stasis-runc" ] || { fail "no runc link for the recovered container"; return 1; }
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" || return 1
	# The checkpoint removed the runc link of the container it saved.
	[ ! -e "$STASIS_RUN_DIR/containerd" ] || { fail "left: $(find "$STASIS_RUN_DIR/containerd")"; return 1; }
	# A restore that fails leaves no container behind.
	STASIS_FAULT=criu-restore "$STASIS" restore --runtime containerd -D "$d/img" 2>/dev/null && { fail "restore fault: succeeded"; return 1; }
	ctrd containers ls -q | grep -qx "$id" && { fail "a failed restore left a container"; return 1; }
	expect_error "the image holds containerd container '$id'" "$STASIS" restore --runtime runc -D "$d/img" || return 1
	expect_error "restore it with --runtime containerd" "$STASIS" restore -D "$d/img" || return 1
	expect_error "containerd does not answer" "$STASIS" restore --runtime containerd --address "$d/none.sock" -D "$d/img" || return 1
	ctrd containers create --rootfs "$d/r" "$id" /bin/true || return 1
	expect_error "container name '$id' is already taken in namespace '$CTRD_NS'" "$STASIS" restore --runtime containerd -D "$d/img" || return 1
	ctrd containers delete "$id"
	make_bundle "$d/b" || return 1
	start_container "stasis-e2e-cd3-$$" "$d/b" || return 1
	"$STASIS" checkpoint --runtime runc "stasis-e2e-cd3-$$" -D "$d/runc-img" || return 1
	expect_error "the image holds runc container" "$STASIS" restore --runtime containerd -D "$d/runc-img" || return 1
	ctrd_remove_all
}

# ---- containers on an image snapshot ----

CTRD_IMAGE="stasis.test/busybox:e2e"

# make_oci_image OUT.tar REF [MARK] [CMD]: an OCI image layout, as a
# tarball, of one layer holding busybox-static and a few files for the
# workload to change, delete and empty (and /mark with MARK); CMD (a JSON
# array, ["/bin/sh"] if not given) its command; no registry.
make_oci_image() {
	local out=$1 ref=$2 cmd=${4:-'["/bin/sh"]'} d r o
	d=$(mktemp -d "$TMP/oci-XXXXXX") && r="$d/rootfs" && o="$d/oci" || return 1
	mkdir -p "$r/bin" "$r/etc" "$r/proc" "$r/sys" "$r/dev" "$r/tmp" "$r/data/sub" "$o/blobs/sha256"
	cp "$(command -v busybox)" "$r/bin/"
	# The pods' sandbox process (make check builds it).
	cp "$BUILD/bin/cri-pause" "$r/bin/pause" || return 1
	for a in sh sleep mv cat rm mkdir; do ln -sf busybox "$r/bin/$a"; done
	echo original >"$r/etc/motd"
	echo doomed >"$r/etc/remove-me"
	echo old >"$r/data/sub/old"
	[ -z "${3:-}" ] || echo "$3" >"$r/mark"
	tar --numeric-owner --owner=0 --group=0 -C "$r" -cf "$d/layer" . || return 1
	# blob FILE MEDIA-TYPE: moved into blobs/, its descriptor on stdout.
	blob() {
		local sum size
		sum=$(sha256sum "$1" | cut -d' ' -f1) && size=$(stat -c %s "$1")
		mv "$1" "$o/blobs/sha256/$sum"
		printf '{"mediaType":"%s","digest":"sha256:%s","size":%d' "$2" "$sum" "$size"
	}
	local layer config manifest
	layer=$(blob "$d/layer" application/vnd.oci.image.layer.v1.tar)
	printf '{"architecture":"amd64","os":"linux","config":{"Cmd":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$cmd" "$(echo "$layer" | sed 's/.*sha256:\([0-9a-f]*\).*/\1/')" >"$d/config"
	config=$(blob "$d/config" application/vnd.oci.image.config.v1+json)
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s},"layers":[%s}]}' \
		"$config" "$layer" >"$d/manifest"
	manifest=$(blob "$d/manifest" application/vnd.oci.image.manifest.v1+json)
	printf '{"schemaVersion":2,"manifests":[%s,"annotations":{"org.opencontainers.image.ref.name":"%s"}}]}' \
		"$manifest" "$ref" >"$o/index.json"
	printf '{"imageLayoutVersion":"1.0.0"}' >"$o/oci-layout"
	tar -C "$o" -cf "$out" . && rm -rf "$d"
}

# ctrd_image_ready: the test image in the tests' namespace.
ctrd_image_ready() {
	containerd_ready || return 1
	ctrd images ls -q | grep -qx "$CTRD_IMAGE" && return 0
	[ -s "$TMP/oci.tar" ] || make_oci_image "$TMP/oci.tar" "$CTRD_IMAGE" || return 1
	ctrd images import "$TMP/oci.tar" >/dev/null
}

# The workload of an image container: it changes the image's files, keeps
# two of them open (CRIU must find them at restore), then counts, and
# checks on every tick that its files are as it left them.
IMAGE_SCRIPT='echo new >/new-file; echo changed >/etc/motd; rm /etc/remove-me
rm -rf /data/sub; mkdir /data/sub; echo fresh >/data/sub/fresh
exec 3</new-file 4</etc/motd
i=0; while :; do i=$((i+1)); echo $i >/state.tmp; mv /state.tmp /state; echo tick $i >>/log
[ -e /etc/remove-me ] && echo FAIL remove-me is back >>/log
[ -e /data/sub/old ] && echo FAIL /data/sub/old is back >>/log
[ "$(cat /etc/motd)" = changed ] || echo FAIL motd >>/log
sleep 0.02; done'

# The root of image container ID as containerd's shim mounts it.
ctrd_rootfs() { echo "$CTRD/state/io.containerd.runtime.v2.task/${2:-$CTRD_NS}/$1/rootfs"; }

# ctrd_image_start ID [SNAPSHOTTER]: a running image container that counts.
ctrd_image_start() {
	ctrd_image_ready || return 1
	ctrd run -d --null-io --snapshotter "${2:-overlayfs}" "$CTRD_IMAGE" "$1" /bin/sh -c "$IMAGE_SCRIPT" >/dev/null || return 1
	wait_counter "$(ctrd_rootfs "$1")" 5
}

# check_image_files ROOT: the workload's changes are all there.
check_image_files() {
	[ "$(cat "$1/new-file" 2>/dev/null)" = new ] || { fail "/new-file: $(ls -la "$1")"; return 1; }
	[ "$(cat "$1/etc/motd")" = changed ] || { fail "/etc/motd: $(cat "$1/etc/motd")"; return 1; }
	[ ! -e "$1/etc/remove-me" ] || { fail "/etc/remove-me is back"; return 1; }
	[ ! -e "$1/data/sub/old" ] || { fail "/data/sub/old is back"; return 1; }
	[ "$(cat "$1/data/sub/fresh" 2>/dev/null)" = fresh ] || { fail "/data/sub/fresh missing"; return 1; }
}

ctrd_has_snapshot() { ctrd snapshots --snapshotter "${2:-overlayfs}" ls | awk '{print $1}' | grep -qx "$1"; }

test_containerd_image_checkpoint_restore() {
	local d="$TMP/ci1" id="ci1" at root
	mkdir -p "$d" && ctrd_image_start "$id" || return 1
	root=$(ctrd_rootfs "$id")
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" --print-stats >"$d/stats" || return 1
	grep -q '"rootfs_diff"' "$d/stats" || { fail "no rootfs_diff phase: $(cat "$d/stats")"; return 1; }
	ctrd containers ls -q | grep -qx "$id" && { fail "the container is still there"; return 1; }
	ctrd_has_snapshot "$id" && { fail "its snapshot is still there"; return 1; }
	tar -tf "$d/img/criu/rootfs-diff.tar" >"$d/members" || return 1
	for m in new-file etc/motd etc/.wh.remove-me data/sub/fresh; do
		grep -qx "\(\./\)\?$m" "$d/members" || { fail "rootfs-diff.tar lacks $m: $(cat "$d/members")"; return 1; }
	done
	grep -q 'data/sub/\(\.wh\.old\|\.wh\.\.wh\.\.opq\)$' "$d/members" || { fail "no whiteout for data/sub/old: $(cat "$d/members")"; return 1; }
	"$STASIS" inspect "$d/img" | grep -q "^image        $CTRD_IMAGE sha256:[0-9a-f]*, overlayfs snapshot" || { fail "inspect: $("$STASIS" inspect "$d/img")"; return 1; }
	"$STASIS" restore --runtime containerd -D "$d/img" >/dev/null || return 1
	ctrd_task "$id" | grep -q RUNNING || { fail "not running: $(ctrd tasks ls)"; return 1; }
	ctrd containers info "$id" | grep -q "\"Image\": \"$CTRD_IMAGE\"" || { fail "not on the image: $(ctrd containers info "$id" | head -8)"; return 1; }
	check_image_files "$root" || return 1
	at=$(counter "$root")
	wait_counter "$root" $((at + 10)) || { fail "the restored container does not count"; return 1; }
	log_is_continuous "$root" || return 1
	# Checkpointed again after its restore: the same image, the same files.
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img2" || return 1
	"$STASIS" restore --runtime containerd -D "$d/img2" --name "$id-2" >/dev/null || return 1
	root=$(ctrd_rootfs "$id-2")
	ctrd_task "$id-2" | grep -q RUNNING || { fail "$id-2: $(ctrd tasks ls)"; return 1; }
	check_image_files "$root" || return 1
	at=$(counter "$root")
	wait_counter "$root" $((at + 10)) || { fail "$id-2 does not count"; return 1; }
	log_is_continuous "$root" || return 1
	# --leave-running: it counts on, and its copy starts from the image.
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id-2" -D "$d/img3" --leave-running || return 1
	at=$(counter "$root")
	wait_counter "$root" $((at + 10)) || { fail "$id-2 stopped counting"; return 1; }
	"$STASIS" restore --runtime containerd -D "$d/img3" --name "$id-3" >/dev/null || return 1
	check_image_files "$(ctrd_rootfs "$id-3")" || return 1
	wait_counter "$(ctrd_rootfs "$id-3")" $((at + 10)) || { fail "$id-3 does not count"; return 1; }
	ctrd_remove_all
	ctrd_has_snapshot "$id-2" && { fail "the snapshot of $id-2 outlived it"; return 1; }
	return 0
}

# The native snapshotter, containerd restarted between checkpoint and
# restore, and the image missing there: one line, nothing created.
# --leave-running on an image container whose files change without pause
# (files written and renamed in a busy loop): the rootfs diff is taken with
# the task paused, so no file vanishes under it; every checkpoint succeeds,
# the container counts on, and the last image restores as a copy that counts.
CHURN_SCRIPT='i=0; while :; do i=$((i+1)); echo $i >/state.tmp; mv /state.tmp /state; echo tick $i >>/log
for j in 1 2 3 4 5 6 7 8; do echo $i >/churn.$j.tmp; mv /churn.$j.tmp /churn.$j; done; done'
test_containerd_leave_running_churn() {
	local d="$TMP/ci5" id="ci5" root at n
	mkdir -p "$d" && ctrd_image_ready || return 1
	ctrd run -d --null-io --snapshotter overlayfs "$CTRD_IMAGE" "$id" /bin/sh -c "$CHURN_SCRIPT" >/dev/null || return 1
	root=$(ctrd_rootfs "$id")
	wait_counter "$root" 5 || return 1
	for n in 1 2 3 4; do
		rm -rf "$d/img"
		"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" --leave-running \
			2>"$d/err" || { fail "checkpoint $n: $(cat "$d/err")"; return 1; }
		ctrd_task "$id" | grep -q RUNNING || { fail "not running after checkpoint $n: $(ctrd tasks ls)"; return 1; }
		at=$(counter "$root")
		wait_counter "$root" $((at + 5)) || { fail "stopped counting after checkpoint $n"; return 1; }
	done
	"$STASIS" restore --runtime containerd -D "$d/img" --name "$id-copy" >/dev/null || return 1
	at=$(counter "$(ctrd_rootfs "$id-copy")")
	wait_counter "$(ctrd_rootfs "$id-copy")" $((at + 5)) || { fail "the copy does not count"; return 1; }
	ctrd_remove_all
}

test_containerd_image_restart_missing() {
	local d="$TMP/ci2" id="ci2" at root
	mkdir -p "$d" && ctrd_image_start "$id" native || return 1
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" || return 1
	containerd_stop && containerd_start || return 1
	ctrd images rm "$CTRD_IMAGE" >/dev/null || return 1
	expect_error "image '$CTRD_IMAGE' is not in containerd's namespace '$CTRD_NS'" "$STASIS" restore --runtime containerd -D "$d/img" || return 1
	ctrd containers ls -q | grep -qx "$id" && { fail "a refused restore made a container"; return 1; }
	ctrd_has_snapshot "$id" native && { fail "a refused restore made a snapshot"; return 1; }
	[ ! -e "$STASIS_RUN_DIR/containerd/$CTRD_NS/$id" ] || { fail "a refused restore made a link folder"; return 1; }
	# Another image under the same name: its diff would not fit.
	make_oci_image "$d/other.tar" "$CTRD_IMAGE" other && ctrd images import "$d/other.tar" >/dev/null || return 1
	expect_error "but the container was checkpointed on sha256:" "$STASIS" restore --runtime containerd -D "$d/img" || return 1
	ctrd containers ls -q | grep -qx "$id" && { fail "a refused restore made a container"; return 1; }
	ctrd images rm "$CTRD_IMAGE" >/dev/null || return 1
	ctrd_image_ready || return 1
	"$STASIS" restore --runtime containerd -D "$d/img" >/dev/null || return 1
	root=$(ctrd_rootfs "$id")
	ctrd snapshots --snapshotter native ls | grep -q "^$id " || { fail "not on a native snapshot: $(ctrd snapshots --snapshotter native ls)"; return 1; }
	check_image_files "$root" || return 1
	at=$(counter "$root")
	wait_counter "$root" $((at + 10)) || { fail "the restored container does not count"; return 1; }
	log_is_continuous "$root" || return 1
	ctrd_remove_all
}

# A diff that fails after runc's checkpoint stopped the task: the container
# and its snapshot stay in containerd; a damaged diff fails the restore,
# which leaves no container and no snapshot.
test_containerd_image_faults() {
	local d="$TMP/ci3" id="ci3"
	mkdir -p "$d" && ctrd_image_start "$id" || return 1
	STASIS_FAULT=rootfs-diff "$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/f" 2>"$d/err" && { fail "succeeded"; return 1; }
	grep -q "stays in containerd with its snapshot '$id'" "$d/err" || { fail "$(cat "$d/err")"; return 1; }
	ctrd_has_snapshot "$id" || { fail "the snapshot went"; return 1; }
	ctrd_remove_all
	ctrd_image_start "$id" || return 1
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" || return 1
	# The apply fails inside the runc link: no container, no snapshot, no
	# link folder left.
	STASIS_FAULT=rootfs-apply "$STASIS" restore --runtime containerd -D "$d/img" >/dev/null 2>"$d/err" && { fail "restored"; return 1; }
	grep -q "rootfs-diff.tar.injected-fault" "$d/err" || { fail "$(cat "$d/err")"; return 1; }
	ctrd containers ls -q | grep -qx "$id" && { fail "a failed restore left a container"; return 1; }
	ctrd_has_snapshot "$id" && { fail "a failed restore left a snapshot"; return 1; }
	[ ! -e "$STASIS_RUN_DIR/containerd/$CTRD_NS/$id" ] || { fail "a failed restore left its link folder"; return 1; }
	# A damaged diff is refused before anything is made.
	head -c 1500 "$d/img/criu/rootfs-diff.tar" >"$d/cut.tar"
	cp "$d/cut.tar" "$d/img/criu/rootfs-diff.tar"
	expect_error "rootfs-diff.tar" "$STASIS" restore --runtime containerd -D "$d/img" || return 1
	ctrd containers ls -q | grep -qx "$id" && { fail "a refused restore left a container"; return 1; }
	"$STASIS" restore --runtime containerd -D "$d/img" --name "$id-b" 2>/dev/null && { fail "restored from a damaged diff"; return 1; }
	ctrd_remove_all
}

# Link folders of containers deleted with ctr go at the next stasis
# containerd command; one whose restore is under way (the lock held), or
# of another containerd, stays.
test_containerd_stale_links() {
	local d="$TMP/cd4" id="cd4" links="$STASIS_RUN_DIR/containerd/$CTRD_NS"
	make_rootfs "$d/r" && ctrd_start "$id" "$d/r" || return 1
	"$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" "$id" -D "$d/img" || return 1
	"$STASIS" restore --runtime containerd -D "$d/img" >/dev/null || return 1
	[ -s "$links/$id/address" ] || { fail "no link folder: $(find "$STASIS_RUN_DIR")"; return 1; }
	"$STASIS" ps >/dev/null
	[ -L "$links/$id/stasis-runc" ] || { fail "ps swept the link of a live container"; return 1; }
	ctrd_remove_all_but_links || return 1
	[ -d "$links/$id" ] || { fail "ctr removed the link folder itself"; return 1; }
	mkdir -p "$links/other" && echo /elsewhere.sock >"$links/other/address"
	# A restore under way holds the lock: nothing is swept meanwhile.
	flock -s "$STASIS_RUN_DIR/containerd" -c "$STASIS ps >/dev/null; [ -d '$links/$id' ]" || { fail "swept during a restore"; return 1; }
	"$STASIS" ps >/dev/null
	[ ! -e "$links/$id" ] || { fail "ps left the stale link folder"; return 1; }
	[ -d "$links/other" ] || { fail "ps swept another containerd's folder"; return 1; }
	rm -rf "$links/other"
	# checkpoint and restore sweep too.
	"$STASIS" restore --runtime containerd -D "$d/img" >/dev/null || return 1
	ctrd_remove_all_but_links || return 1
	expect_error "no container 'nope'" "$STASIS" checkpoint --runtime containerd --namespace "$CTRD_NS" nope -D "$d/x" || return 1
	[ ! -e "$links/$id" ] || { fail "checkpoint left the stale link folder"; return 1; }
	"$STASIS" restore --runtime containerd -D "$d/img" >/dev/null || return 1
	ctrd_remove_all_but_links || return 1
	ctrd containers create --rootfs "$d/r" "$id-x" /bin/true || return 1
	expect_error "container name '$id-x' is already taken" "$STASIS" restore --runtime containerd -D "$d/img" --name "$id-x" || return 1
	[ ! -e "$links/$id" ] || { fail "restore left the stale link folder"; return 1; }
	ctrd_remove_all
}

# Every container of the tests' namespace deleted with ctr alone, as a user
# would, leaving stasis's link folders.
ctrd_remove_all_but_links() {
	for c in $(ctrd containers ls -q); do
		ctrd tasks kill -s SIGKILL "$c" >/dev/null 2>&1
		for _ in $(seq 50); do ctrd tasks ls | grep -q "^$c .*RUNNING" || break; sleep 0.05; done
		ctrd tasks delete -f "$c" >/dev/null 2>&1
		ctrd containers delete "$c" >/dev/null 2>&1 || return 1
	done
}

# containerd 2.1 (make fetches it: scripts/fetch-sid-tools.sh), as current
# distributions run it, beside bookworm's 1.6 that the tests above use:
# the same checkpoint and restore (twice, under another name), a
# --leave-running restart, and a restore from a containerd image, in a
# containerd and folders of their own. bookworm's runc 1.1 runs under it.
test_containerd2_current() {
	local bin="$BUILD/sid/bin" r=0
	[ -x "$bin/containerd" ] || { fail "no containerd 2.1 in $bin (make check fetches it)"; return 1; }
	local PATH="$bin:$PATH" TMP="$TMP/containerd2" CTRD="$TMP/containerd2/containerd"
	local -x CONTAINERD_ADDRESS="$CTRD/state/containerd.sock"
	mkdir -p "$TMP"
	containerd_ready || return 1
	ctr version | grep -A2 "^Server" | grep -q "Version: *v\?2\.1\." ||
		{ fail "not containerd 2.1: $(ctr version)"; containerd_cleanup; return 1; }
	test_containerd_checkpoint_restore || r=1
	[ $r = 0 ] && { test_containerd_leave_running_restart || r=1; }
	[ $r = 0 ] && { test_containerd_image_checkpoint_restore || r=1; }
	containerd_cleanup
	return $r
}

# own_criu DIR: DIR/criu-bin/criu, stasis's CRIU as a runtime finds it on
# PATH (the first criu there), with its plugin loaded from the build (as
# from CRIU's plugin folder once installed); each run's arguments go to
# DIR/criu-calls.
own_criu() {
	mkdir -p "$1/criu-bin"
	printf 'libdir "%s"\n' "$BUILD/lib/stasis/criu" >"$1/criu.conf"
	printf '#!/bin/sh\necho "$*" >>%s\nCRIU_CONFIG_FILE=%s exec %s "$@"\n' \
		"$1/criu-calls" "$1/criu.conf" "$BUILD/criu/sbin/criu" >"$1/criu-bin/criu"
	chmod +x "$1/criu-bin/criu"
}

# containerd 2.1's own commands with stasis's CRIU as the machine's criu (the
# first on containerd's PATH, as make install puts it) and no stasis command:
# `ctr containers checkpoint --task --rw` into a checkpoint image while the
# task runs on, then, the task killed and the container deleted, `ctr
# containers restore --live --rw` from it. The restored task counts on from
# the checkpoint with its files as they were then, and every CRIU run went
# through stasis's CRIU.
test_containerd2_ctr_checkpoint() {
	local bin="$BUILD/sid/bin" id=ck1 at root log
	[ -x "$bin/containerd" ] || { fail "no containerd 2.1 in $bin (make check fetches it)"; return 1; }
	local TMP="$TMP/containerd2-ctr" CTRD="$TMP/containerd2-ctr/containerd"
	local -x CONTAINERD_ADDRESS="$CTRD/state/containerd.sock"
	own_criu "$TMP"
	local PATH="$TMP/criu-bin:$bin:$PATH"
	ctrd_image_start "$id" || { containerd_cleanup; return 1; }
	root=$(ctrd_rootfs "$id")
	ctrd containers checkpoint --task --rw "$id" "stasis.test/checkpoint:$id" >/dev/null ||
		{ fail "ctr containers checkpoint failed"; containerd_cleanup; return 1; }
	at=$(counter "$root")
	[ -s "$TMP/criu-calls" ] || { fail "containerd's runc ran no criu of PATH's"; containerd_cleanup; return 1; }
	ctrd tasks kill -s SIGKILL "$id" >/dev/null 2>&1
	for _ in $(seq 100); do ctrd_task "$id" | grep -q STOPPED && break; sleep 0.05; done
	ctrd tasks delete "$id" >/dev/null 2>&1
	ctrd containers delete "$id" || { containerd_cleanup; return 1; }
	: >"$TMP/criu-calls"
	ctrd containers restore --live --rw "$id" "stasis.test/checkpoint:$id" ||
		{ fail "ctr containers restore failed"; containerd_cleanup; return 1; }
	[ -s "$TMP/criu-calls" ] || { fail "the restore ran no criu of PATH's"; containerd_cleanup; return 1; }
	ctrd_task "$id" | grep -q RUNNING || { fail "restored task: $(ctrd tasks ls)"; containerd_cleanup; return 1; }
	root=$(ctrd_rootfs "$id")
	wait_counter "$root" $((at + 10)) || { fail "the restored task does not count"; containerd_cleanup; return 1; }
	check_image_files "$root" || { containerd_cleanup; return 1; }
	# Its log went on from the checkpoint's tick (the counter continued).
	log_is_continuous "$root" || { containerd_cleanup; return 1; }
	containerd_cleanup
}

# ---- containerd's CRI, as the kubelet drives it ----

# cri_start DIR RUNTIME: containerd 2.1 with its CRI plugin on (the tests'
# other containerds have it off), in DIR, its pod sandbox image and the
# test image served by a registry of the test's own on 127.0.0.1
# (tests/tools/oci-registry.py): the kubelet's pulls, and a restore's pull
# of the image a checkpoint was made from, go there. Hosts' network for
# the pods: no CNI. RUNTIME: runc's binary. Sets CRI (the client, with
# its socket) and CRI_REG (the registry's host:port).
cri_start() {
	local c=$1 runtime=$2 port
	mkdir -p "$c/cni" "$c/logs"
	[ -s "$c/pause.tar" ] || make_oci_image "$c/pause.tar" stasis.test/pause:1 "" '["/bin/pause"]' || return 1
	[ -s "$c/image.tar" ] || make_oci_image "$c/image.tar" stasis.test/busybox:1 || return 1
	python3 "$(dirname "$0")/../tools/oci-registry.py" "$c/port" "stasis/pause:1=$c/pause.tar" "stasis/busybox:1=$c/image.tar" \
		>"$c/registry.log" 2>&1 &
	echo $! >"$c/registry.pid"
	PIDS+=("$(cat "$c/registry.pid")")
	for _ in $(seq 100); do [ -s "$c/port" ] && break; sleep 0.05; done
	port=$(cat "$c/port" 2>/dev/null) || { fail "no registry: $(cat "$c/registry.log")"; return 1; }
	CRI_REG="localhost:$port"
	# The registry speaks plain HTTP (the CRI would try TLS first).
	mkdir -p "$c/certs.d/$CRI_REG"
	printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' "$CRI_REG" "$CRI_REG" \
		>"$c/certs.d/$CRI_REG/hosts.toml"
	cat >"$c/config.toml" <<EOT
version = 3
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/state/containerd.sock"
[ttrpc]
  address = "$c/state/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$c/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$CRI_REG/stasis/pause:1"
  [plugins.'io.containerd.cri.v1.runtime']
    disable_apparmor = true
    restrict_oom_score_adj = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$c/cni"]
      conf_dir = "$c/cni"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "$runtime"
  [plugins.'io.containerd.internal.v1.opt']
    path = "$c/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
EOT
	mkdir -p "$c/tmp"
	TMPDIR="$c/tmp" containerd -c "$c/config.toml" >>"$c/containerd.log" 2>&1 &
	echo $! >"$c/pid"
	PIDS+=("$(cat "$c/pid")")
	CRI="$BUILD/bin/cri-client -a $c/state/containerd.sock -t 120"
	for _ in $(seq 100); do $CRI version >/dev/null 2>&1 && return 0; sleep 0.1; done
	fail "containerd's CRI did not start: $(tail -3 "$c/containerd.log")"
}

# cri_stop DIR: every pod gone, containerd and the registry stopped.
cri_stop() {
	local c=$1 p
	for p in $($CRI pods 2>/dev/null | awk '{print $1}'); do $CRI stopp "$p" >/dev/null 2>&1; $CRI rmp "$p" >/dev/null 2>&1; done
	for f in pid registry.pid; do
		p=$(cat "$c/$f" 2>/dev/null) || continue
		kill "$p" 2>/dev/null
		for _ in $(seq 100); do [ -e "/proc/$p" ] || break; sleep 0.05; done
	done
	rm -f "$c/pid" "$c/registry.pid"
	grep -o "$c/state/[^ ]*/rootfs" /proc/mounts | while read -r m; do umount "$m"; done
	for cg in /sys/fs/cgroup/k8s.io /sys/fs/cgroup/*/k8s.io; do
		[ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	return 0
}

# cri_pod DIR: a pod (host network) in DIR/pod.json, its ID on stdout.
# Its containers' PID namespace: CRI_PID_MODE, 1 (one each, the kubelet's
# default) or 0 (the pod's, shared: shareProcessNamespace).
cri_pod() {
	printf '{"metadata":{"name":"stasis-cri","namespace":"default","uid":"stasis-cri-%s","attempt":0},"log_directory":"%s","linux":{"security_context":{"namespace_options":{"network":2,"pid":%s}}}}' \
		"$$" "$1/logs" "${CRI_PID_MODE:-1}" >"$1/pod.json"
	$CRI runp "$1/pod.json"
}

# cri_counter DIR [LABELS_JSON]: containerd 2.1 with its CRI (cri_start, in
# DIR, stasis's CRIU as the machine's criu: own_criu), a pod, and in it the
# image container of IMAGE_SCRIPT, started and counting; sets pod and cid.
# On failure everything is stopped.
cri_counter() {
	local c=$1 labels=${2:-'{}'}
	own_criu "$c"
	PATH="$c/criu-bin:$BUILD/sid/bin:$PATH" cri_start "$c" "$(command -v runc)" || { cri_stop "$c"; return 1; }
	pod=$(cri_pod "$c") || { fail "RunPodSandbox failed"; cri_stop "$c"; return 1; }
	$CRI pull "$CRI_REG/stasis/busybox:1" >/dev/null || { fail "pull failed"; cri_stop "$c"; return 1; }
	python3 - "$c/ctr.json" "$CRI_REG/stasis/busybox:1" "$IMAGE_SCRIPT" "$labels" "${CRI_PID_MODE:-1}" <<'PY'
import json, sys
json.dump({"metadata": {"name": "counter"}, "image": {"image": sys.argv[2]},
           "command": ["/bin/sh", "-c", sys.argv[3]], "log_path": "counter.log",
           "labels": json.loads(sys.argv[4]),
           "linux": {"security_context": {"namespace_options": {"network": 2, "pid": int(sys.argv[5])}}}},
          open(sys.argv[1], "w"))
PY
	cid=$($CRI create "$pod" "$c/ctr.json" "$c/pod.json") && $CRI start "$cid" >/dev/null ||
		{ fail "the container did not start: $(tail -3 "$c/containerd.log")"; cri_stop "$c"; return 1; }
	wait_counter "$(ctrd_rootfs "$cid" k8s.io)" 5 ||
		{ fail "the container does not count: $($CRI state "$cid"), $(tail -2 "$c/logs/counter.log")"; cri_stop "$c"; return 1; }
}

# cri_restore_counter DIR ARCHIVE [JSON]: the CRI restores the container
# from ARCHIVE as the kubelet asks (the container it had, the archive as
# its image; JSON's keys replace the request's), in the pod; it runs, counts
# on from the checkpoint, and its files are as they were then. Sets rid;
# stops everything on failure.
cri_restore_counter() {
	local c=$1 root at
	python3 - "$c/ctr.json" "$c/restore.json" "$2" "${3:-{\}}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["image"] = {"image": sys.argv[3]}; c["log_path"] = "restored.log"
c.update(json.loads(sys.argv[4]))
json.dump(c, open(sys.argv[2], "w"))
PY
	rid=$($CRI create "$pod" "$c/restore.json" "$c/pod.json") && $CRI start "$rid" >/dev/null ||
		{ fail "the restore failed: $(find "$c/state" -name restore.log -exec grep -h "Error\|stasis" {} + | tail -5)"; cri_stop "$c"; return 1; }
	[ "$($CRI state "$rid")" = CONTAINER_RUNNING ] || { fail "restored: $($CRI state "$rid")"; cri_stop "$c"; return 1; }
	root=$(ctrd_rootfs "$rid" k8s.io)
	at=$(counter "$root")
	wait_counter "$root" $((at + 10)) || { fail "the restored container does not count"; cri_stop "$c"; return 1; }
	check_image_files "$root" && log_is_continuous "$root" || { cri_stop "$c"; return 1; }
}

# The kubelet's checkpoint of a container (CRI CheckpointContainer, the
# container running on, as Kubernetes' forensic checkpoint leaves it) and
# its restore from the archive (CreateContainer with the archive as its
# image, then StartContainer), with stasis's CRIU as the machine's criu and
# no stasis command: the archive has checkpointctl's layout, every CRIU run
# went through stasis's CRIU, and the restored container counts on from
# the checkpoint with its files as they were then.
test_containerd2_cri_checkpoint() {
	local bin="$BUILD/sid/bin" c="$TMP/cri" pod cid rid
	local CTRD="$TMP/cri" # ctrd_rootfs
	[ -x "$bin/containerd" ] && [ -x "$BUILD/bin/cri-client" ] || { fail "no containerd 2.1 or CRI client in $BUILD (make check makes them)"; return 1; }
	cri_counter "$c" || return 1
	$CRI checkpoint "$cid" "$c/checkpoint.tar" >/dev/null ||
		{ fail "CheckpointContainer failed: $(grep -i error "$c/containerd.log" | tail -2)"; cri_stop "$c"; return 1; }
	grep -q "swrk" "$c/criu-calls" || { fail "containerd's runc ran no criu of PATH's"; cri_stop "$c"; return 1; }
	[ "$($CRI state "$cid")" = CONTAINER_RUNNING ] || { fail "the checkpointed container stopped: $($CRI state "$cid")"; cri_stop "$c"; return 1; }
	for f in checkpoint/ config.dump spec.dump status.dump rootfs-diff.tar dump.log; do
		tar -tf "$c/checkpoint.tar" | grep -q "^\(\./\)\?$f" || { fail "$f not in the archive: $(tar -tf "$c/checkpoint.tar" | head)"; cri_stop "$c"; return 1; }
	done
	tar -xOf "$c/checkpoint.tar" dump.log >"$c/dump.log" 2>/dev/null || tar -xOf "$c/checkpoint.tar" ./dump.log >"$c/dump.log"
	grep -q "Dumping finished successfully" "$c/dump.log" || { fail "the archive's dump.log"; cri_stop "$c"; return 1; }
	# The CRI froze the container before it called CRIU: stasis's plugin,
	# loaded, found no GPU in the tree and left CRIU's freeze as it was.
	grep -q 'stasis: no process of the tree of PID [0-9]* uses the GPU' "$c/dump.log" &&
		! grep -q "unfreezing cgroup" "$c/dump.log" ||
		{ fail "the plugin in dump.log: $(grep 'stasis\|unfreezing\|Plugin' "$c/dump.log")"; cri_stop "$c"; return 1; }
	$CRI stop "$cid" 0 >/dev/null && $CRI rm "$cid" >/dev/null || { fail "the container would not go"; cri_stop "$c"; return 1; }
	: >"$c/criu-calls"
	cri_restore_counter "$c" "$c/checkpoint.tar" || return 1
	[ -s "$c/criu-calls" ] || { fail "the restore ran no criu of PATH's"; cri_stop "$c"; return 1; }
	cri_stop "$c"
}

# The same in a pod whose containers share its PID namespace
# (shareProcessNamespace): the sandbox's pause is PID 1 there and reaps the
# orphans of the container's stop (a zombie would keep the container's
# session number, which its restore gives its first process again), and
# the container restores into that namespace.
test_containerd2_cri_shared_pid_namespace() {
	local bin="$BUILD/sid/bin" c="$TMP/cri-shared" pod cid rid rpid
	local CTRD="$TMP/cri-shared" CRI_PID_MODE=0 # ctrd_rootfs, cri_pod
	[ -x "$bin/containerd" ] && [ -x "$BUILD/bin/cri-client" ] || { fail "no containerd 2.1 or CRI client in $BUILD (make check makes them)"; return 1; }
	cri_counter "$c" || return 1
	$CRI checkpoint "$cid" "$c/checkpoint.tar" >/dev/null ||
		{ fail "CheckpointContainer failed: $(grep -i error "$c/containerd.log" | tail -2)"; cri_stop "$c"; return 1; }
	$CRI stop "$cid" 0 >/dev/null && $CRI rm "$cid" >/dev/null || { fail "the container would not go"; cri_stop "$c"; return 1; }
	cri_restore_counter "$c" "$c/checkpoint.tar" || return 1
	rpid=$($CRI inspect "$rid" | sed -n 's/^info: //p' | python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
	set -- $(grep NSpid "/proc/$rpid/status")
	[ $# -ge 3 ] && [ "$3" != 1 ] || { fail "the restored container is not in the pod's PID namespace: $*"; cri_stop "$c"; return 1; }
	cri_stop "$c"
}

# containerd's CRI restores a container from a stasis archive: stasis
# checkpoints a container the CRI made (`checkpoint --runtime containerd
# --namespace k8s.io --export`), which stasis's archive gives the CRI's
# status.dump (its name, image, labels) and the image's NAME@DIGEST for;
# the CRI removes what is left of it, and restores it from the archive
# (CreateContainer with the archive as its image, StartContainer) in a pod
# of its own; it counts on from the checkpoint with its files as they were.
test_containerd2_cri_restores_stasis_archive() {
	local bin="$BUILD/sid/bin" c="$TMP/cri-stasis" pod cid rid
	local CTRD="$TMP/cri-stasis" # ctrd_rootfs
	[ -x "$bin/containerd" ] && [ -x "$BUILD/bin/cri-client" ] || { fail "no containerd 2.1 or CRI client in $BUILD (make check makes them)"; return 1; }
	cri_counter "$c" '{"app": "stasis-e2e"}' || return 1
	PATH="$bin:$PATH" "$STASIS" checkpoint --runtime containerd --address "$c/state/containerd.sock" --namespace k8s.io "$cid" \
		-D "$c/img" --export "$c/stasis.tar" || { cri_stop "$c"; return 1; }
	tar -xOf "$c/stasis.tar" status.dump >"$c/status.dump" && tar -xOf "$c/stasis.tar" config.dump >"$c/config.dump" ||
		{ fail "no status.dump or config.dump: $(tar -tf "$c/stasis.tar" | grep -v '^checkpoint/.')"; cri_stop "$c"; return 1; }
	python3 - "$c/status.dump" "$c/config.dump" "$CRI_REG" <<'PY' || { fail "the archive's CRI files: $(cat "$c/status.dump" "$c/config.dump")"; cri_stop "$c"; return 1; }
import json, sys
s, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert s["metadata"]["name"] == "counter" and s["labels"] == {"app": "stasis-e2e"}, s
assert s["image"]["image"] == sys.argv[3] + "/stasis/busybox:1" and s["log_path"].startswith("/"), s
ref = c["rootfsImageRef"]
assert ref.startswith(sys.argv[3] + "/stasis/busybox@sha256:") and len(ref.split("@sha256:")[1]) == 64, c
PY
	# stasis removed the container from containerd: the CRI forgets it.
	$CRI rm "$cid" >/dev/null 2>&1
	cri_restore_counter "$c" "$c/stasis.tar" || return 1
	# Its image is the one status.dump names (the request's is the archive),
	# as containerd 2.1 takes it from there, with the annotations.
	$CRI inspect "$rid" >"$c/inspect"
	python3 - "$c/inspect" "$CRI_REG" <<'PY' || { fail "the restored container: $(head -30 "$c/inspect")"; cri_stop "$c"; return 1; }
import json, sys
s, _ = json.JSONDecoder().raw_decode(open(sys.argv[1]).read())
assert s["image"]["image"] == sys.argv[2] + "/stasis/busybox:1", s["image"]
assert s["annotations"].get("restored") == "true", s["annotations"]
PY
	cri_stop "$c"
}
