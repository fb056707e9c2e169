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
	# A link planted in the image is refused, and not followed: CRIU's
	# log goes to the restore's work folder, never into the image.
	echo secret >"$w/secret" && chmod 600 "$w/secret"
	ln -s "$w/secret" "$w/img/restore.log"
	expect_error "restore.log is not a regular file" "$STASIS" restore -D "$w/img" --detach || return 1
	[ "$(cat "$w/secret")" = secret ] || { fail "CRIU's log went through a planted link"; return 1; }
	rm "$w/img/restore.log"
	touch "$w/before" && sleep 0.01
	"$STASIS" restore -D "$w/img" --detach >"$w/pid" || return 1
	[ -z "$(find "$w/img" -newer "$w/before" -o -name 'restore*' -o -name stats-restore)" ] ||
		{ fail "the restore wrote into the image: $(find "$w/img" -newer "$w/before" -o -name 'restore*')"; return 1; }
	kill -TERM "$(cat "$w/pid")"
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
	vouch "$img"
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

# wait_gone PID: up to 5 s until PID is gone.
wait_gone() { for _ in $(seq 50); do alive "$1" || return 0; sleep 0.1; done; return 1; }

# Whose image is it: an image sealed elsewhere (made where its maker is
# root, copied into a folder of root's) is refused until root names the
# key that sealed it; an unsealed one and one whose manifest changed after
# it was sealed are refused; inspect says which is which.
test_image_seal() {
	local w="$TMP/sec7" pid rpid
	start_workload "$w" || return 1
	# A key folder others may open: refused before anything changes.
	mkdir -m 755 "$w/open-keys"
	expect_error "seal key's folder .* is open to others" env STASIS_KEY_DIR="$w/open-keys" "$STASIS" checkpoint "$pid" -D "$w/never" || return 1
	[ ! -e "$w/never" ] && alive "$pid" || { fail "the refused checkpoint changed something"; return 1; }
	# The other machine: its own host key.
	STASIS_KEY_DIR="$w/elsewhere" "$STASIS" checkpoint "$pid" -D "$w/made-elsewhere" || return 1
	reap "$pid"
	[ "$(stat -c %a "$w/elsewhere")/$(stat -c %a "$w/elsewhere/seal.key")" = 700/600 ] ||
		{ fail "key folder and key: $(stat -c %a "$w/elsewhere" "$w/elsewhere/seal.key")"; return 1; }
	# Copied here, into a folder of root's, as a user would hand it over.
	cp -a "$w/made-elsewhere" "$w/foreign"
	expect_error "sealed by key [0-9a-f]*, neither this host's nor one given with --trust-key" "$STASIS" restore -D "$w/foreign" --detach || return 1
	grep -q "restore with --trust-key FILE" "$TMP/stderr" || { fail "no advice: $(cat "$TMP/stderr")"; return 1; }
	alive "$pid" && { fail "a process came back from a foreign image"; return 1; }
	"$STASIS" inspect "$w/foreign" >"$w/out" || return 1
	grep -q "^sealed  *by key [0-9a-f]*, not this host's" "$w/out" || { fail "inspect: $(cat "$w/out")"; return 1; }
	# A key root names: the image restores.
	"$STASIS" restore -D "$w/foreign" --detach --trust-key "$w/elsewhere/seal.key" >"$w/pid" || return 1
	rpid=$(cat "$w/pid")
	runs_on "$w" || return 1
	# This host's own image of it.
	"$STASIS" checkpoint "$rpid" -D "$w/img" || return 1
	wait_gone "$rpid" || { fail "the checkpointed tree did not end"; return 1; }
	# A trusted key must be root's alone.
	cp "$w/elsewhere/seal.key" "$w/open.key" && chmod 644 "$w/open.key"
	expect_error "open to others" "$STASIS" restore -D "$w/foreign" --trust-key "$w/open.key" || return 1
	"$STASIS" inspect "$w/img" | grep -q "^sealed  *by this host" || { fail "inspect: $("$STASIS" inspect "$w/img")"; return 1; }
	# Its manifest changed after it was sealed: a process made root's.
	cp -a "$w/img" "$w/tampered"
	sed -i 's/"pid": /"pid":  /' "$w/tampered/manifest.json"
	expect_error "manifest.json does not match its seal by this host" "$STASIS" restore -D "$w/tampered" || return 1
	"$STASIS" inspect "$w/tampered" | grep -q "^sealed  *broken" || { fail "inspect: $("$STASIS" inspect "$w/tampered")"; return 1; }
	# No seal: as an image from before stasis sealed them.
	cp -a "$w/img" "$w/unsealed" && rm "$w/unsealed/manifest.seal"
	expect_error "is not sealed" "$STASIS" restore -D "$w/unsealed" --trust-key "$w/elsewhere/seal.key" || return 1
	grep -q "docs/SECURITY.md" "$TMP/stderr" || { fail "no advice: $(cat "$TMP/stderr")"; return 1; }
	"$STASIS" inspect "$w/unsealed" | grep -q "^sealed  *no" || { fail "inspect: $("$STASIS" inspect "$w/unsealed")"; return 1; }
	# Vouched for by root as docs/SECURITY.md shows, it restores.
	vouch "$w/unsealed"
	"$STASIS" restore -D "$w/unsealed" --detach >"$w/pid" || return 1
	rpid=$(cat "$w/pid")
	runs_on "$w" || return 1
	kill -TERM "$rpid" && wait_gone "$rpid" || { fail "the restored tree did not end"; return 1; }
	# The seal's rules do not hang on a planted seal.
	cp -a "$w/img" "$w/fifo" && rm "$w/fifo/manifest.seal" && mkfifo "$w/fifo/manifest.seal"
	expect_error "manifest.seal is not a seal" "$STASIS" restore -D "$w/fifo" || return 1
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
	vouch "$w/img"
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

# A user who owns the folder an image folder is in swaps root's folder for
# one of theirs (renameat2 RENAME_EXCHANGE, no write on root's folder
# needed) between two of stasis's steps, in a loop: a checkpoint, a
# checkpoint of a tree that then dies, and a restore through such a folder
# (and through a link into it) are refused on one line before anything is
# read or written, 200 times each while the swap runs; root's files and the
# user's folder are untouched and the workload runs on. The same image in
# a folder of root's restores.
test_image_folder_swapped() {
	local w="$TMP/swapped" owner swapper i
	start_workload "$w" || return 1
	owner=$(mktemp -d /tmp/stasis-e2e-owner-XXXXXX) && chown nobody "$owner" && chmod 755 "$owner"
	echo "$owner" >>"$TMP/stages"
	echo "root's own" >"$w/victim" && chmod 600 "$w/victim"
	mkdir -m 700 "$owner/ckpt"
	as_nobody mkdir "$owner/theirs" || return 1
	as_nobody ln -s "$w/victim" "$owner/theirs/manifest.json" || return 1
	as_nobody ln -s "$w" "$owner/theirs/criu" || return 1
	ln -s "$owner/ckpt" "$w/link"
	setsid setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
end = time.time() + 120
while time.time() < end:
    libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE' "$owner/ckpt" "$owner/theirs" </dev/null >/dev/null 2>&1 &
	swapper=$!
	PIDS+=("$swapper")
	for i in $(seq 200); do
		expect_error "is in $owner, a folder that its owner can change" "$STASIS" checkpoint "$pid" -D "$owner/ckpt" ||
			{ kill_group "$swapper"; fail "checkpoint, try $i"; return 1; }
	done
	"$STASIS" checkpoint "$pid" -D "$w/img" --leave-running 2>"$w/err" || { kill_group "$swapper"; fail "$(cat "$w/err")"; return 1; }
	for i in $(seq 200); do
		expect_error "is in $owner, a folder that its owner can change" "$STASIS" restore -D "$owner/ckpt" ||
			{ kill_group "$swapper"; fail "restore, try $i"; return 1; }
	done
	expect_error "is in $owner, a folder that its owner can change" "$STASIS" restore -D "$w/link" || { kill_group "$swapper"; return 1; }
	kill_group "$swapper"
	[ "$(cat "$w/victim")" = "root's own" ] && [ "$(stat -c '%U %a' "$w/victim")" = "root 600" ] ||
		{ fail "root's file changed: $(ls -l "$w/victim")"; return 1; }
	[ -z "$(find "$owner" -mindepth 2 ! -name manifest.json ! -name criu)" ] || { fail "written in $owner: $(find "$owner" -mindepth 2)"; return 1; }
	runs_on "$w" || return 1
	# A tree that dies while its checkpoint runs: refused all the same,
	# before its cleanup could empty a folder.
	kill -TERM "$pid"
	reap "$pid"
	expect_error "is in $owner, a folder that its owner can change" "$STASIS" checkpoint "$pid" -D "$owner/ckpt" || return 1
	"$STASIS" restore -D "$w/img" --detach >/dev/null 2>"$w/err" || { fail "$(cat "$w/err")"; return 1; }
	wait_log_grows "$w" 3 || { fail "the restored workload does not run"; return 1; }
	kill_group "$pid"
}

# A file the process holds open read-write, in a folder of nobody's, whose
# name nobody points at a file of root's (a link) or at a FIFO between the
# checkpoint and the restore: CRIU's restore reopens files by path, as
# root, with the process's access mode, and followed the link (a review had
# root's 0600 file open read-write in the restored process) or hung in the
# FIFO's open. Each restore is refused on one line, root's file untouched;
# with the file put back, the image restores and the process reads it.
test_named_file_swapped() {
	local w="$TMP/named" user pid
	mkdir -p "$w"
	user=$(mktemp -d /tmp/stasis-e2e-named-XXXXXX) && chown nobody "$user" && chmod 755 "$user"
	echo "$user" >>"$TMP/stages"
	echo "root's own" >"$w/secret" && chmod 600 "$w/secret"
	printf 'the process its own\n' >"$user/f" && chown nobody "$user/f"
	setsid /usr/bin/python3 -c '
import os, sys, time
f, w = sys.argv[1], sys.argv[2]
fd = os.open(f, os.O_RDWR)
while True:
    os.lseek(fd, 0, 0); data = os.read(fd, 64).decode(errors="replace")
    open(w + "/seen.new", "w").write(data); os.replace(w + "/seen.new", w + "/seen"); time.sleep(0.05)' "$user/f" "$w" </dev/null >/dev/null 2>&1 &
	pid=$!
	PIDS+=("$pid")
	for _ in $(seq 100); do [ -s "$w/seen" ] && break; sleep 0.05; done
	"$STASIS" checkpoint "$pid" -D "$w/img" 2>"$w/err" || { fail "$(cat "$w/err")"; return 1; }
	reap "$pid"
	as_nobody mv "$user/f" "$user/f.away" || return 1
	as_nobody ln -s "$w/secret" "$user/f" || return 1
	expect_error "/f is a link, where the dumped file was a regular file" "$STASIS" restore -D "$w/img" --detach || return 1
	alive "$pid" && { fail "restored through the link"; return 1; }
	as_nobody rm "$user/f" && as_nobody mkfifo "$user/f" || return 1
	expect_error "/f is a FIFO, where the dumped file was a regular file" "$STASIS" restore -D "$w/img" --detach || return 1
	alive "$pid" && { fail "restored onto the FIFO"; return 1; }
	[ "$(cat "$w/secret")" = "root's own" ] && [ "$(stat -c '%U %a' "$w/secret")" = "root 600" ] ||
		{ fail "root's file changed: $(ls -l "$w/secret")"; return 1; }
	as_nobody rm "$user/f" && as_nobody mv "$user/f.away" "$user/f" || return 1
	rm -f "$w/seen"
	"$STASIS" restore -D "$w/img" --detach >/dev/null 2>"$w/err" || { fail "$(cat "$w/err")"; return 1; }
	for _ in $(seq 100); do [ -s "$w/seen" ] && break; sleep 0.05; done
	[ "$(cat "$w/seen")" = "the process its own" ] || { fail "the restored process reads '$(cat "$w/seen")'"; return 1; }
	kill_group "$pid"
}
