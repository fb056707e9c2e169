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
	containerd -c "$CTRD/config.toml" >>"$CTRD/containerd.log" 2>&1 &
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

COUNTER_SCRIPT='i=0; while :; do i=$((i+1)); echo $i > /state.tmp; mv /state.tmp /state; echo tick $i >> /log; sleep 0.02; done'

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
