# shellcheck shell=bash
# CRIU's failures in one line that names the cause, with a remedy, and a
# failed checkpoint that leaves its image folder as it found it. Sourced
# by run.

# hold_file FILE READY: a process of a session of its own that holds FILE
# open and sleeps, once it says so in READY; sets pid.
hold_file() {
	setsid python3 -c 'import sys, time
f = open(sys.argv[1])
print("ready", flush=True)
time.sleep(1e6)' "$1" </dev/null >"$2" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	for _ in $(seq 200); do [ -s "$2" ] && break; sleep 0.02; done
}

# A client of a unix socket whose listener is outside the tree: CRIU
# refuses it; the error names the socket and says --ext-unix-sk, the log
# it names is kept in the run's work folder, and -D is as it was (an empty
# folder the user gave stays, empty; one stasis made goes). Once the client
# closes the connection, the same command succeeds.
test_failed_checkpoint_leaves_dir() {
	local w="$TMP/outsock" lp cp
	mkdir -p "$w/given"
	setsid python3 -c 'import socket, sys, time
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
l.bind(sys.argv[1] + "/listen.sock")
l.listen(1)
c, _ = l.accept()
time.sleep(1e6)' "$w" </dev/null >/dev/null 2>&1 &
	lp=$!
	PIDS+=("$lp")
	for _ in $(seq 100); do [ -S "$w/listen.sock" ] && break; sleep 0.02; done
	setsid python3 -c 'import os, socket, sys, time
w = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(w + "/listen.sock")
n = 0
while True:
    if s and os.path.exists(w + "/close"):
        s.close()
        s = None
        open(w + "/closed", "w").close()
    n += 1
    open(w + "/state.new", "w").write("%d\n" % n)
    os.replace(w + "/state.new", w + "/state")
    time.sleep(0.02)' "$w" </dev/null >/dev/null 2>&1 &
	cp=$!
	PIDS+=("$cp")
	wait_counter "$w" 3 || { fail "the client does not count"; return 1; }
	expect_error "External socket is used.*name $w/listen.sock.*checkpoint and restore with --ext-unix-sk" \
		"$STASIS" checkpoint "$cp" -D "$w/given" || return 1
	cat "$TMP/stderr"
	[ -d "$w/given" ] && [ -z "$(ls -A "$w/given")" ] || { fail "-D given: $(ls -AR "$w/given")"; return 1; }
	grep -q "External socket is used" "$(error_log "$TMP/stderr")" ||
		{ fail "no log kept where the error says: $(cat "$TMP/stderr")"; return 1; }
	case "$(error_log "$TMP/stderr")" in "$STASIS_RUN_DIR"/checkpoint-*/dump.log) ;;
	*) fail "the log is not in the run's work folder: $(cat "$TMP/stderr")"; return 1 ;; esac
	expect_error "External socket is used" "$STASIS" checkpoint "$cp" -D "$w/made" || return 1
	[ ! -e "$w/made" ] || { fail "-D made: $(ls -AR "$w/made")"; return 1; }
	alive "$cp" || { fail "the client died"; return 1; }
	touch "$w/close"
	for _ in $(seq 100); do [ -e "$w/closed" ] && break; sleep 0.02; done
	"$STASIS" checkpoint "$cp" -D "$w/given" || { fail "the same command failed again"; return 1; }
	reap "$cp"
	[ -s "$w/given/criu/dump.log" ] && [ -e "$w/given/manifest.json" ] || { fail "image: $(ls -R "$w/given")"; return 1; }
	"$STASIS" restore -D "$w/given" --detach >/dev/null || return 1
	wait_counter "$w" "$(($(counter "$w") + 3))" || { fail "the restored client does not count"; return 1; }
	kill -9 "$cp" "$lp"
}

# Ctrl-C while CRIU dumps (SIGINT to stasis's process group, CRIU's too,
# as a terminal sends it) leaves -D as it was: the same command again
# succeeds.
test_interrupted_checkpoint_again() {
	local w="$TMP/intr" ck log
	mkdir -p "$w/img"
	MEMORY_WORKLOAD_MB=256 start_memory_workload "$w" || return 1
	# stasis leads a process group of its own, CRIU in it.
	setsid "$STASIS" checkpoint "$pid" -D "$w/img" 2>"$w/err" &
	ck=$!
	for _ in $(seq 1000); do
		[ -e "$w/img/criu/dump.log" ] && break
		for log in "$STASIS_RUN_DIR"/checkpoint-*-"$ck"/dump.log; do [ -e "$log" ] && break 2; done
		sleep 0.005
	done
	kill -INT -- "-$ck"
	wait "$ck" && { fail "checkpoint succeeded"; return 1; }
	cat "$w/err"
	grep -q "interrupted" "$w/err" || { fail "not said interrupted: $(cat "$w/err")"; return 1; }
	[ -z "$(ls -A "$w/img")" ] || { fail "left in -D: $(ls -AR "$w/img")"; return 1; }
	alive "$pid" || { fail "the tree died"; return 1; }
	"$STASIS" checkpoint "$pid" -D "$w/img" || { fail "the same command failed again"; return 1; }
	reap "$pid"
	"$STASIS" restore -D "$w/img" --detach >/dev/null || return 1
	kill -9 "$pid"
}

# A file the process held is deleted after the checkpoint: the restore's
# error names the file, not "Unable to open fd=3", and says to put it back.
test_restore_deleted_file_cause() {
	local w="$TMP/gone"
	mkdir -p "$w"
	echo data >"$w/held"
	hold_file "$w/held" "$w/ready"
	"$STASIS" checkpoint "$pid" -D "$w/img" || return 1
	reap "$pid"
	rm "$w/held"
	expect_error "Can't open file ${w#/}/held on restore.*a file the process had open is gone.*put it back.*full log: $STASIS_RUN_DIR/restore-" \
		"$STASIS" restore -D "$w/img" --detach || return 1
	cat "$TMP/stderr"
	! grep -q "Unable to open fd" "$TMP/stderr" || { fail "an echo of the failure: $(cat "$TMP/stderr")"; return 1; }
	echo data >"$w/held"
	"$STASIS" restore -D "$w/img" --detach >/dev/null || { fail "restore with the file back failed"; return 1; }
	kill -9 "$pid"
}

# A process in the host's mount namespace holding a file on a mount of
# another namespace (opened through /proc/PID/root): CRIU cannot find the
# mount; the error names the file and says what to do.
test_mount_outside_cause() {
	local w="$TMP/mntout" ns
	mkdir -p "$w/m"
	unshare -m --propagation private sh -c "mount -t tmpfs none '$w/m' && echo x >'$w/m/f' && exec sleep 1000" &
	ns=$!
	PIDS+=("$ns")
	for _ in $(seq 100); do [ -e "/proc/$ns/root$w/m/f" ] && break; sleep 0.02; done
	hold_file "/proc/$ns/root$w/m/f" "$w/ready"
	expect_error "Can't lookup mount=[0-9]* for fd=3 path=$w/m/f.*on a mount outside the tree's mount namespace" \
		"$STASIS" checkpoint "$pid" -D "$w/img" || return 1
	cat "$TMP/stderr"
	[ ! -e "$w/img" ] || { fail "left in -D: $(ls -AR "$w/img")"; return 1; }
	alive "$pid" || { fail "the tree died"; return 1; }
	kill -9 "$pid" "$ns"
}

# ---- without a GPU ----

# Without a driver stasis ps lists the session leaders (a tree stasis can
# checkpoint) and the containers, the GPU columns empty and said so once,
# and exits 0; --json is valid JSON with the same.
test_ps_without_driver() {
	local d="$TMP/psnodrv" id="stasis-e2e-ps-$$"
	start_workload "$d/w" || return 1
	local tree=$pid
	setsid sleep 1000 </dev/null >/dev/null 2>&1 &
	pid=$!
	PIDS+=("$pid")
	make_bundle "$d/b" && start_container "$id" "$d/b" || return 1
	"$STASIS" ps >"$d/out" 2>"$d/err" || { fail "ps failed: $(cat "$d/err")"; return 1; }
	cat "$d/out"
	[ "$(grep -c "the GPU columns are empty" "$d/out")" = 1 ] || { fail "not said once: $(cat "$d/out")"; return 1; }
	grep -q "^$pid  *sleep  " "$d/out" || { fail "the session leader $pid is not listed"; return 1; }
	grep -q "^$tree  *stasis  " "$d/out" || { fail "the workload $tree is not listed"; return 1; }
	! grep -q "^$(runc state "$id" | sed -n 's/.*"pid": \([0-9]*\).*/\1/p') " "$d/out" ||
		{ fail "the container's init is listed as a tree"; return 1; }
	grep -q "^$id .*runc *running" "$d/out" || { fail "the container is not listed"; return 1; }
	"$STASIS" ps --json >"$d/json" 2>"$d/err" || { fail "ps --json failed: $(cat "$d/err")"; return 1; }
	python3 - "$d/json" "$pid" "$id" <<'PY' || { fail "ps --json: $(cat "$d/json")"; return 1; }
import json, sys
o = json.load(open(sys.argv[1]))
assert o["gpu_driver"] is False, o["gpu_driver"]
p = [p for p in o["processes"] if p["pid"] == int(sys.argv[2])]
assert p and p[0]["command"] == "sleep" and p[0]["gpus"] is None, p
c = [c for c in o["containers"] if c["id"] == sys.argv[3]]
assert c and c[0]["status"] == "running" and c[0]["cuda_processes"] is None, c
PY
	runc delete --force "$id"
	kill -9 "$pid" "$tree"
}

# A session leader on a terminal whose master is outside its tree (as a
# job started with setsid from a shell's terminal): CRIU refuses it
# without --shell-job, and the error says to pass it; with it the same
# tree is checkpointed.
test_shell_job_cause() {
	local w="$TMP/shelljob" top job
	mkdir -p "$w"
	python3 -c 'import fcntl, os, sys, termios, time
m, s = os.openpty()
if os.fork() == 0:
    os.setsid()
    fd = os.open(os.ttyname(s), os.O_RDWR)
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    if os.fork() == 0:
        os.setsid()
        os.dup2(fd, 0)
        os.dup2(fd, 1)
        for f in (fd, s, m):
            os.close(f)
        open(sys.argv[1] + "/pid", "w").write(str(os.getpid()))
        while True:
            time.sleep(0.05)
time.sleep(1e6)' "$w" </dev/null >/dev/null 2>&1 &
	top=$!
	PIDS+=("$top")
	for _ in $(seq 200); do [ -s "$w/pid" ] && break; sleep 0.02; done
	job=$(cat "$w/pid")
	PIDS+=("$job")
	expect_error "without correspond master peer.*checkpoint and restore with --shell-job" \
		"$STASIS" checkpoint "$job" -D "$w/img" || return 1
	cat "$TMP/stderr"
	[ ! -e "$w/img" ] || { fail "left in -D: $(ls -AR "$w/img")"; return 1; }
	"$STASIS" checkpoint "$job" -D "$w/img" --shell-job --leave-running || { fail "with --shell-job"; return 1; }
	kill -9 "$job" "$top"
}
