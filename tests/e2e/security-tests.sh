# shellcheck shell=bash
# A local user, a careless user and a hostile peer against root's stasis
# (docs/SECURITY.md), sourced by run. The user is nobody:
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# A staging root that everyone may write, as /dev/shm: links and folders
# planted under a staging name of a dead run are left alone; the folder a
# killed run of root's own left is removed, and said to be.
test_sweep_leaves_planted() {
	local w="$TMP/sec1" pid root
	start_workload "$w" || return 1
	root=$(mktemp -d /dev/shm/stasis-e2e-XXXXXX) && chmod 1777 "$root"
	echo "$root" >>"$TMP/stages"
	mkdir -p "$w/victim" && echo keep >"$w/victim/file"
	as_nobody ln -s "$w/victim" "$root/stasis-stage-3999999-link" || return 1
	as_nobody mkdir "$root/stasis-stage-3999998-dir" && as_nobody touch "$root/stasis-stage-3999998-dir/f"
	mkdir -m 700 "$root/stasis-stage-3999997-dead" && head -c 1M /dev/zero >"$root/stasis-stage-3999997-dead/pages-1.img"
	STASIS_STAGE_DIR="$root" "$STASIS" checkpoint "$pid" -D "$w/img" --leave-running --stage 2>"$w/err" || { fail "$(cat "$w/err")"; return 1; }
	[ "$(cat "$w/victim/file" 2>/dev/null)" = keep ] || { fail "the sweep followed a planted link"; return 1; }
	[ -L "$root/stasis-stage-3999999-link" ] || { fail "the planted link went"; return 1; }
	[ -e "$root/stasis-stage-3999998-dir/f" ] || { fail "nobody's folder was emptied"; return 1; }
	[ ! -e "$root/stasis-stage-3999997-dead" ] || { fail "the dead run's folder stayed"; return 1; }
	grep -q "removed $root/stasis-stage-3999997-dead (1.0 MiB), left by stasis PID 3999997" "$w/err" || { fail "no note: $(cat "$w/err")"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
}

# An image folder someone else controls is refused before anything
# changes; one root made is root's alone, files and folders, whatever the
# umask.
test_image_folder_trust() {
	local w="$TMP/sec2" pid bad shared
	start_workload "$w" || return 1
	# A sticky folder everyone may write, as /tmp, outside TMP (root's).
	shared=$(mktemp -d /tmp/stasis-e2e-shared-XXXXXX) && chmod 1777 "$shared"
	echo "$shared" >>"$TMP/stages"
	as_nobody mkdir "$shared/theirs" || return 1
	expect_error "belongs to uid 65534" "$STASIS" checkpoint "$pid" -D "$shared/theirs" || return 1
	mkdir -m 775 "$w/groupw" && chmod 775 "$w/groupw"
	expect_error "writable by group or others" "$STASIS" checkpoint "$pid" -D "$w/groupw" || return 1
	[ -z "$(find "$shared/theirs" "$w/groupw" -mindepth 1)" ] || { fail "wrote into a refused folder: $(find "$shared/theirs" "$w/groupw" -mindepth 1)"; return 1; }
	runs_on "$w" || return 1
	(umask 000 && "$STASIS" checkpoint "$pid" -D "$w/img" --leave-running) || return 1
	(umask 000 && "$STASIS" checkpoint "$pid" -D "$w/zimg" --leave-running --compress) || return 1
	(umask 000 && "$STASIS" checkpoint "$pid" -D "$w/simg" --leave-running --stage) || return 1
	for img in img zimg simg; do
		bad=$(find "$w/$img" \( -type f -perm /077 \) -o \( -type d -perm /077 \) )
		[ -z "$bad" ] || { fail "$img: readable by others: $(ls -ld $bad)"; return 1; }
	done
	# No one else can read what the image holds.
	as_nobody grep -rqa . "$w/img" 2>/dev/null && { fail "nobody read the image"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
	# Restore refuses a folder another user owns or may write.
	cp -a "$w/img" "$w/img2" && chown -R 65534 "$w/img2"
	expect_error "belongs to uid 65534" "$STASIS" restore -D "$w/img2" || return 1
	chown -R 0 "$w/img2" && chmod 777 "$w/img2/criu"
	expect_error "writable by group or others" "$STASIS" restore -D "$w/img2" || return 1
	alive "$pid" && { fail "restored from a refused folder"; return 1; }
	# A link planted where CRIU writes its log is not followed.
	echo secret >"$w/secret" && chmod 600 "$w/secret"
	ln -s "$w/secret" "$w/img/restore.log"
	expect_error "restore.log is not a regular file" "$STASIS" restore -D "$w/img" --detach || return 1
	[ "$(cat "$w/secret")" = secret ] || { fail "CRIU's log went through a planted link"; return 1; }
	rm "$w/img/restore.log"
	"$STASIS" restore -D "$w/img" --detach >"$w/pid" || return 1
	[ -f "$w/img/restore.log" ] && [ ! -L "$w/img/restore.log" ] || { fail "no log of its own"; return 1; }
	kill -TERM "$(cat "$w/pid")"
	# A read-only image folder: one line that says so.
	cp -a "$w/zimg" "$w/ro" && mount --bind -o ro "$w/ro" "$w/ro" && echo "$w/ro" >>"$TMP/mounts"
	for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
	expect_error "cannot create CRIU's log .*Read-only file system" "$STASIS" restore -D "$w/ro" || return 1
	umount "$w/ro"
}

# expect_manifest_refused CASE WANT EDIT...: a copy of the image with its
# manifest edited (a python expression on m) is refused with WANT.
manifest_case() {
	local img="$w/$1" want=$2 edit=$3
	cp -a "$w/img" "$img"
	python3 - "$img/manifest.json" "$edit" <<'PY' || return 1
import json, sys
m = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(m, open(sys.argv[1], "w"))
PY
	expect_error "$want" "$STASIS" restore -D "$img" || { fail "case $1"; return 1; }
}

# The manifest decides nothing that is not the image's own: names outside
# the image, files that are not files, an empty list, a file not listed.
test_manifest_hostile() {
	local w="$TMP/sec3" pid f start
	start_workload "$w" || return 1
	"$STASIS" checkpoint "$pid" -D "$w/img" || return 1
	reap "$pid"
	manifest_case abs "corrupt manifest: a file entry without a valid name" 'm["files"][0]["name"] = "/etc/passwd"' || return 1
	manifest_case dotdot "corrupt manifest: a file entry without a valid name" 'm["files"][0]["name"] = "criu/../../x"' || return 1
	manifest_case empty "no CRIU inventory" 'm["files"] = []' || return 1
	manifest_case many "more phases than" 'm["phases_us"] = {"p%d" % i: i for i in range(100000)}' || return 1
	cp -a "$w/img" "$w/extra" && cp "$w/extra/criu/inventory.img" "$w/extra/criu/core-99.img"
	expect_error "core-99.img is a file: not part of the image" "$STASIS" restore -D "$w/extra" || return 1
	cp -a "$w/img" "$w/fifo" && f=$(ls "$w/fifo"/criu/pages-*.img | head -1) && rm "$f" && mkfifo "$f"
	expect_error "not a regular file" "$STASIS" restore -D "$w/fifo" || return 1
	cp -a "$w/img" "$w/zero" && f=$(ls "$w/zero"/criu/pages-*.img | head -1) && rm "$f" && ln -s /dev/zero "$f"
	expect_error "not a regular file" "$STASIS" restore -D "$w/zero" || return 1
	cp -a "$w/img" "$w/mfifo" && rm "$w/mfifo/manifest.json" && mkfifo "$w/mfifo/manifest.json"
	expect_error "not a regular file" "$STASIS" inspect "$w/mfifo" || return 1
	cp -a "$w/img" "$w/mzero" && rm "$w/mzero/manifest.json" && ln -s /dev/zero "$w/mzero/manifest.json"
	expect_error "manifest.json" "$STASIS" inspect "$w/mzero" || return 1
	# inspect: a large manifest is quick; escape sequences never reach the terminal.
	cp -a "$w/img" "$w/esc"
	python3 - "$w/esc/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["processes"][0]["cmdline"] = "\x1b]0;owned\x07\x1b[2J evil"
m["hostname"] = "\x1b[31mred"
json.dump(m, open(sys.argv[1], "w"))
PY
	start=$(date +%s%N)
	"$STASIS" inspect "$w/esc" >"$w/out" || return 1
	[ $(( ($(date +%s%N) - start) / 1000000 )) -lt 2000 ] || { fail "inspect took over 2 s"; return 1; }
	grep -q $'\x1b' "$w/out" && { fail "an escape reached the output"; return 1; }
	grep -q "evil" "$w/out" || { fail "inspect: $(cat "$w/out")"; return 1; }
	alive "$pid" && { fail "a process came back"; return 1; }
	return 0
}

# Container ids become paths: one with "../" is refused before any is made,
# from the command line or from the image.
test_container_names_checked() {
	local w="$TMP/sec4" pid
	start_workload "$w" || return 1
	"$STASIS" checkpoint "$pid" -D "$w/img" || return 1
	reap "$pid"
	python3 - "$w/img/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["container"] = {"runtime": "containerd", "id": "../../../../../tmp/stasis-e2e-escape", "namespace": "default"}
json.dump(m, open(sys.argv[1], "w"))
PY
	expect_error "is not a valid containerd container id" "$STASIS" restore --runtime containerd -D "$w/img" || return 1
	expect_error "is not a valid containerd container id" "$STASIS" restore --runtime containerd --name ../../../../tmp/stasis-e2e-escape2 -D "$w/img" || return 1
	expect_error "is not a valid containerd namespace" "$STASIS" restore --runtime containerd --name ok --namespace ../x -D "$w/img" || return 1
	expect_error "is not a valid runc container id" "$STASIS" checkpoint --runtime runc ../x -D "$w/c" || return 1
	ls -d /tmp/stasis-e2e-escape* 2>/dev/null && { fail "a path was made from a name"; return 1; }
	return 0
}

# ---- the receiver against peers without the key, and peers that lie ----

HOSTILE="$BUILD/bin/hostile-peer"
hostile() { nsenter --net=/run/netns/"$SRC_NS" "$HOSTILE" "$@"; }

# Idle connections, a port scan and garbage neither delay nor end a
# receiver: the real migration beside them goes through at once, and
# --once ends with it.
test_receive_hostile_peers() {
	local w="$TMP/sec5" pid holder receiver idler start took
	mig_hosts sec5 || return 1
	receiver || return 1
	ns_workload "$w" || return 1
	hostile idle "$DST" 8 20 >"$w/idle" &
	idler=$!
	for _ in $(seq 100); do [ -s "$w/idle" ] && break; sleep 0.05; done
	hostile scan "$DST" && hostile garbage "$DST" || { fail "the peers could not connect"; return 1; }
	sleep 0.5
	alive "$receiver" || { fail "a scan ended the receiver: $(cat "$TMP/recv.err")"; return 1; }
	start=$(date +%s%N)
	migrate "$pid" --to "$DST" --key-file "$KEY" >/dev/null 2>"$w/err" || { fail "migrate: $(cat "$w/err") / $(cat "$TMP/recv.err")"; return 1; }
	took=$(( ($(date +%s%N) - start) / 1000000 ))
	[ "$took" -lt 4000 ] || { fail "migration took $took ms beside idle peers"; return 1; }
	wait "$receiver" || { fail "receiver: $(cat "$TMP/recv.err")"; return 1; }
	echo "migration beside 8 idle peers, a scan and garbage: $took ms"
	kill "$idler" 2>/dev/null
	reap "$holder"
	runs_on "$w" || return 1
	pkill -TERM -f "__demo-workload $w " 2>/dev/null
	mig_unhosts
}

# flood_migrate DIR [NS N SECONDS FROM...]: a workload in DIR migrated to a
# fresh --once receiver while hostile-peer in network namespace NS floods
# it with N idle connections from the addresses FROM (none: the namespace's
# own), for SECONDS at most (no NS: no flood); sets took, the migration's
# time in ms, and flood, what the flooder did.
flood_migrate() {
	local w=$1 pid holder receiver flooder="" start r
	shift
	flood=""
	receiver || return 1
	ns_workload "$w" || return 1
	if [ $# -gt 0 ]; then
		nsenter --net=/run/netns/"$1" "$HOSTILE" flood "$DST" "${@:2}" >"$w/flood" 2>&1 &
		flooder=$!
		for _ in $(seq 100); do [ -s "$w/flood" ] && break; sleep 0.05; done
		grep -q ready "$w/flood" || { fail "no flood: $(cat "$w/flood")"; return 1; }
	fi
	# With a flood, past its first second: the receiver drops and the
	# flood reopens. Without, the same wait, so that only the flood differs.
	sleep 1.5
	start=$(date +%s%N)
	migrate "$pid" --to "$DST" --key-file "$KEY" >/dev/null 2>"$w/err"
	r=$?
	took=$(( ($(date +%s%N) - start) / 1000000 ))
	if [ -n "$flooder" ]; then
		kill -TERM "$flooder"
		wait "$flooder"
		flood=$(grep opened "$w/flood")
	fi
	[ $r = 0 ] || { fail "migrate beside '$*' after $took ms: $(cat "$w/err") / $(tail -3 "$TMP/recv.err")"; return 1; }
	wait "$receiver" || { fail "receiver: $(cat "$TMP/recv.err")"; return 1; }
	reap "$holder"
	runs_on "$w" || return 1
	pkill -TERM -f "__demo-workload $w " 2>/dev/null
	return 0
}

# A flood of idle connections blocks no migration: 300 from the source's
# own address (the one whose bound the migration shares), from one other
# address, and from 30 (127.0.0.2 to 127.0.0.31, in the destination), each
# opened again as soon as the receiver drops it. Every migration beside a
# flood finishes; the median of five takes at most twice the median of five
# without (a migration takes about 150 ms here, one in four or so 50 ms
# less: the page pipes' reader sees the dump's end at its next 50 ms poll
# step). A connection that says nothing is dropped after 1 s.
test_receive_flood() {
	local w="$TMP/sec8" took flood i k kind receiver n
	local -a kinds=(unloaded own one thirty)
	local -A times floods median args
	mig_hosts sec8 || return 1
	args=([unloaded]="" [own]="$SRC_NS 300 60" [one]="$DST_NS 300 60 127.0.0.2"
		[thirty]="$DST_NS 300 60 $(seq -s ' ' -f '127.0.0.%g' 2 31)")
	# Each round in another order: a load that comes or goes on this
	# machine meanwhile weighs on every kind alike.
	for i in 0 1 2 3 4; do
		for k in 0 1 2 3; do
			kind=${kinds[(i + k) % 4]}
			# shellcheck disable=SC2086 # the arguments, split
			flood_migrate "$w/$kind$i" ${args[$kind]} || return 1
			times[$kind]+="$took " floods[$kind]=$flood
		done
	done
	for kind in "${kinds[@]}"; do
		median[$kind]=$(tr ' ' '\n' <<<"${times[$kind]}" | grep . | sort -n | sed -n 3p)
		echo "$kind: ${times[$kind]}ms${floods[$kind]:+ (the last flood opened ${floods[$kind]#opened })}"
	done
	echo "median of five, ms: unloaded ${median[unloaded]}; beside 300 idle connections from the source's own address ${median[own]}, from one other ${median[one]}, from 30 ${median[thirty]}"
	for kind in own one thirty; do
		[ "${median[$kind]}" -le $((2 * median[unloaded])) ] ||
			{ fail "a flood ($kind) slowed the migration from ${median[unloaded]} ms to ${median[$kind]} ms"; return 1; }
	done
	# One idle connection is dropped after 1 s each time it is opened.
	receiver || return 1
	flood=$(nsenter --net=/run/netns/"$DST_NS" "$HOSTILE" flood "$DST" 1 4 127.0.0.2 | grep opened)
	kill -TERM "$receiver"
	wait "$receiver" || { fail "receiver: $(cat "$TMP/recv.err")"; return 1; }
	n=$(awk '{print $2}' <<<"$flood")
	echo "one idle connection for 4 s: $flood"
	[ "${n:-0}" -ge 3 ] && [ "$n" -le 5 ] || { fail "one idle connection for 4 s: $flood (4 if dropped after 1 s)"; return 1; }
	mig_unhosts
}

# A peer with the key that stalls mid-frame is dropped after the channel's
# deadline; one that sends a manifest that is no JSON is refused; the
# receiver lives through both, and leaves no lock behind.
test_receive_lying_peers() {
	local w="$TMP/sec6" staller start
	mig_hosts sec6 || return 1
	nsenter --net=/run/netns/"$DST_NS" "$STASIS" receive --listen "$DST" --key-file "$KEY" >"$TMP/recv.out" 2>"$TMP/recv.err" &
	receiver=$!
	for _ in $(seq 100); do nsenter --net=/run/netns/"$DST_NS" ss -ltn | grep -q ":7070 " && break; sleep 0.05; done
	mkdir -p "$w"
	hostile bad-manifest "$DST" "$KEY" 3999990 >"$w/bad" 2>&1
	grep -q "answer: the receiver: corrupt manifest" "$w/bad" || { fail "bad manifest: $(cat "$w/bad") / $(cat "$TMP/recv.err")"; return 1; }
	alive "$receiver" || { fail "the receiver died on a bad manifest: $(cat "$TMP/recv.err")"; return 1; }
	ls "$STASIS_RUN_DIR"/pid-3999990.lock 2>/dev/null && { fail "a lock was left"; return 1; }
	start=$(date +%s)
	hostile stall "$DST" "$KEY" >"$w/stall" &
	staller=$!
	for _ in $(seq 900); do grep -q "stopped sending in the middle" "$TMP/recv.err" && break; sleep 0.05; done
	grep -q "stopped sending in the middle" "$TMP/recv.err" || { fail "the stall was not dropped: $(cat "$TMP/recv.err")"; return 1; }
	echo "stalled peer dropped after $(( $(date +%s) - start )) s"
	alive "$receiver" || { fail "the receiver died"; return 1; }
	# SIGTERM ends it at once, whatever waits.
	hostile stall "$DST" "$KEY" >/dev/null &
	sleep 1
	kill -TERM "$receiver"
	for _ in $(seq 40); do alive "$receiver" || break; sleep 0.1; done
	alive "$receiver" && { fail "the receiver is deaf to SIGTERM"; return 1; }
	kill "$staller" $! 2>/dev/null
	mig_unhosts
}

# A receiver with the key that lies about its restore (half a RESTORED, or
# nothing at all) cannot keep the workload frozen: SIGTERM to the source
# rolls back, and the workload runs on here.
test_migrate_lying_receiver() {
	local w pid holder liar src mode
	for mode in partial-restored silent; do
		w="$TMP/sec7-$mode"
		mig_hosts "sec7$mode" || return 1
		ns_workload "$w" || return 1
		nsenter --net=/run/netns/"$DST_NS" "$HOSTILE" "$mode" "$DST" "$KEY" >"$w/liar" 2>&1 &
		liar=$!
		for _ in $(seq 100); do grep -q listening "$w/liar" && break; sleep 0.05; done
		nsenter --net=/run/netns/"$SRC_NS" "$STASIS" migrate "$pid" --to "$DST" --key-file "$KEY" 2>"$w/err" &
		src=$!
		for _ in $(seq 400); do grep -q ready "$w/liar" && break; sleep 0.05; done
		grep -q ready "$w/liar" || { fail "$mode: the liar got no image: $(cat "$w/liar") / $(cat "$w/err")"; return 1; }
		sleep 1
		kill -TERM "$src"
		for _ in $(seq 100); do alive "$src" || break; sleep 0.1; done
		alive "$src" && { fail "$mode: the source is deaf to SIGTERM"; return 1; }
		wait "$src" && { fail "$mode: migrate succeeded"; return 1; }
		grep -q "runs here again" "$w/err" || { fail "$mode: $(cat "$w/err")"; return 1; }
		runs_on "$w" || { fail "$mode: the workload is frozen (state $(awk "/^State/ {print \$2}" /proc/$pid/status))"; return 1; }
		echo "$mode -> $(cat "$w/err")"
		kill "$liar" 2>/dev/null
		kill -TERM "$pid"
		reap "$holder"
		mig_unhosts
	done
}
