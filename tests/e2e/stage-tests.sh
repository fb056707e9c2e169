# shellcheck shell=bash
# --leave-running staged in memory: the tree runs again before the image is
# written; the image is complete only once it is on disk. Sourced by run.

# Once the checkpoint in the background has begun writing the image
# (STASIS_FAULT=stage-slow holds that part back), the workload of $1
# counts again: stasis is in its write from memory.
wait_runs_again() {
	for _ in $(seq 500); do [ -n "$(ls "$1/img/criu" 2>/dev/null)" ] && break; sleep 0.01; done
	[ -n "$(ls "$1/img/criu" 2>/dev/null)" ] || { fail "the image was never written"; return 1; }
	local at
	at=$(counter "$1")
	wait_counter "$1" $((at + 3)) || { fail "the workload does not run again"; return 1; }
	[ ! -e "$1/img/manifest.json" ] || { fail "the image was done before the test's signal"; return 1; }
}

# mount_stage DIR SIZE: a tmpfs of SIZE at DIR, unmounted by the cleanup.
mount_stage() {
	mkdir -p "$1" && mount -t tmpfs -o size="$2" tmpfs "$1" || return 1
	echo "$1" >>"$TMP/mounts"
}

# The staging folders stasis left in $1 (its stage root).
stages_in() { find "$1" -maxdepth 1 -name 'stasis-stage-*' 2>/dev/null; }

test_stage_leave_running() {
	local w="$TMP/st1" pid root="$TMP/st1-stage"
	mount_stage "$root" 512m || return 1
	start_workload "$w" || return 1
	STASIS_STAGE_DIR=$root "$STASIS" checkpoint "$pid" -D "$w/img0" --leave-running --json \
		>"$w/stats" || return 1
	grep -q '"not_staged_because":"the page cache takes the image below the dirty limit"' \
		"$w/stats" || { fail "staged a small image: $(cat "$w/stats")"; return 1; }
	STASIS_STAGE_DIR=$root "$STASIS" checkpoint "$pid" -D "$w/img" --leave-running --stage \
		--json >"$w/stats" || return 1
	grep -q '"staged":true' "$w/stats" || { fail "not staged: $(cat "$w/stats")"; return 1; }
	for phase in pause stage_write durable; do
		grep -q "\"$phase\"" "$w/stats" || { fail "no $phase in $(cat "$w/stats")"; return 1; }
	done
	[ -z "$(stages_in "$root")" ] || { fail "staging folder left: $(stages_in "$root")"; return 1; }
	grep -q '"staged": *true' "$w/img/manifest.json" || { fail "manifest does not say staged"; return 1; }
	local at
	at=$(counter "$w")
	wait_counter "$w" $((at + 10)) || { fail "workload stopped"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
	"$STASIS" restore -D "$w/img" --detach >"$w/pid" || return 1
	wait_log_grows "$w" 5 || { fail "the restored tree does not count"; return 1; }
	kill -TERM "$pid"
	for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
	! grep -q FAIL "$w/log" || { fail "$(grep FAIL "$w/log")"; return 1; }
}

# Where the staging folder has no room, or --no-stage, the image is
# written while the tree waits, and the stats say why.
test_stage_falls_back() {
	local w="$TMP/st2" pid root="$TMP/st2-stage"
	mount_stage "$root" 1m || return 1
	start_workload "$w" || return 1
	STASIS_STAGE_DIR=$root "$STASIS" checkpoint "$pid" -D "$w/a" --leave-running --stage --json \
		>"$w/stats" || return 1
	grep -q '"staged":false' "$w/stats" || { fail "staged: $(cat "$w/stats")"; return 1; }
	grep -q '"not_staged_because":"not enough room in the staging folder"' "$w/stats" ||
		{ fail "no reason: $(cat "$w/stats")"; return 1; }
	"$STASIS" checkpoint "$pid" -D "$w/b" --leave-running --no-stage --json >"$w/stats" || return 1
	grep -q '"not_staged_because":"--no-stage"' "$w/stats" || { fail "$(cat "$w/stats")"; return 1; }
	"$STASIS" inspect "$w/a" >/dev/null && "$STASIS" inspect "$w/b" >/dev/null || return 1
	kill -TERM "$pid"
	reap "$pid"
}

# A SIGKILL while the staged image is written: the tree runs on, the image
# is refused as incomplete, and the next checkpoint sweeps the staging
# folder the dead run left in memory.
test_stage_killed_while_writing() {
	local w="$TMP/st3" pid root="$TMP/st3-stage" cp
	mount_stage "$root" 512m || return 1
	start_workload "$w" || return 1
	STASIS_STAGE_DIR=$root STASIS_FAULT=stage-slow "$STASIS" checkpoint "$pid" -D "$w/img" \
		--leave-running --stage &
	cp=$!
	wait_runs_again "$w" || return 1
	kill -9 "$cp"
	reap "$cp"
	[ ! -e "$w/img/manifest.json" ] || { fail "an image cut short has a manifest"; return 1; }
	local at
	at=$(counter "$w")
	wait_counter "$w" $((at + 10)) || { fail "workload stopped"; return 1; }
	expect_error "an incomplete one" "$STASIS" restore -D "$w/img" || return 1
	[ -n "$(stages_in "$root")" ] || { fail "no staging folder to sweep"; return 1; }
	STASIS_STAGE_DIR=$root "$STASIS" checkpoint "$pid" -D "$w/img2" --leave-running --stage || return 1
	[ -z "$(stages_in "$root")" ] || { fail "not swept: $(stages_in "$root")"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
}

# A killed run's staging folder with a mount whose name the mount table
# escapes (a space, a tab, a backslash, a newline; a tmpfs stands in for
# its FUSE folder, a PID that is gone for its owner): the next
# checkpoint's sweep detaches it by its real name and removes the folder.
test_stage_sweeps_escaped_mount() {
	local w="$TMP/st6" pid root="$TMP/st6-stage" dead=4000000 old name
	name=$'served a\tb\\c\nd'
	mount_stage "$root" 64m || return 1
	while kill -0 "$dead" 2>/dev/null; do dead=$((dead + 1)); done
	old="$root/stasis-stage-$dead-abcdef"
	mkdir -m 700 "$old" && mkdir "$old/$name" && mount -t tmpfs none "$old/$name" &&
		touch "$old/$name/pages-1.img" || { fail "no stand-in"; return 1; }
	grep -qF 'served\040a\011b\134c\012d' /proc/self/mountinfo || { fail "not escaped: $(grep -F "$root" /proc/self/mountinfo)"; return 1; }
	start_workload "$w" || return 1
	STASIS_STAGE_DIR=$root "$STASIS" checkpoint "$pid" -D "$w/img" --leave-running \
		>/dev/null 2>"$w/err" || { fail "$(cat "$w/err")"; return 1; }
	grep -qF "$old" /proc/self/mountinfo && { fail "the dead run's mount is left"; return 1; }
	[ -z "$(stages_in "$root")" ] || { fail "not swept: $(stages_in "$root")"; return 1; }
	grep -q "removed $old .*left by stasis PID $dead, which was killed" "$w/err" ||
		{ fail "the sweep said: $(cat "$w/err")"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
}

# SIGTERM while the staged image is written: one line, non-zero, the tree
# runs on, and nothing of the image is kept.
test_stage_interrupted_while_writing() {
	local w="$TMP/st4" pid root="$TMP/st4-stage" cp
	mount_stage "$root" 512m || return 1
	start_workload "$w" || return 1
	STASIS_STAGE_DIR=$root STASIS_FAULT=stage-slow "$STASIS" checkpoint "$pid" -D "$w/img" \
		--leave-running --stage 2>"$w/err" &
	cp=$!
	wait_runs_again "$w" || return 1
	kill -TERM "$cp"
	wait "$cp" && { fail "an interrupted checkpoint succeeded"; return 1; }
	[ "$(wc -l <"$w/err")" = 1 ] || { fail "not one line: $(cat "$w/err")"; return 1; }
	grep -q "interrupted by a signal while writing the image.*runs on; no image was kept" \
		"$w/err" || { fail "$(cat "$w/err")"; return 1; }
	[ -z "$(find "$w/img" -name '*.img' 2>/dev/null)" ] && [ ! -e "$w/img/manifest.json" ] ||
		{ fail "image kept: $(ls -R "$w/img")"; return 1; }
	[ -z "$(stages_in "$root")" ] || { fail "staging folder left"; return 1; }
	local at
	at=$(counter "$w")
	wait_counter "$w" $((at + 10)) || { fail "workload stopped"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
}

# Unstaged or compressed, the image is hashed, flushed and sealed once the
# tree runs again (STASIS_FAULT=seal-slow holds the seal back): a SIGKILL
# then leaves the tree running and an image refused as incomplete.
test_leave_running_killed_while_sealing() {
	local w="$TMP/st5" pid cp opt root="$TMP/st5-stage"
	mount_stage "$root" 2g || return 1 # --compress wants 1 GiB free
	start_workload "$w" || return 1
	for opt in --no-stage --compress; do
		rm -rf "$w/img"
		STASIS_STAGE_DIR=$root STASIS_FAULT=seal-slow "$STASIS" checkpoint "$pid" -D "$w/img" \
			--leave-running $opt &
		cp=$!
		wait_runs_again "$w" || { fail "with $opt"; return 1; }
		kill -9 "$cp"
		reap "$cp"
		[ ! -e "$w/img/manifest.json" ] || { fail "$opt: an image cut short has a manifest"; return 1; }
		expect_error "an incomplete one" "$STASIS" restore -D "$w/img" || return 1
		local at
		at=$(counter "$w")
		wait_counter "$w" $((at + 10)) || { fail "$opt: workload stopped"; return 1; }
	done
	# The dead runs' lock stops nothing, and their staging folders are swept.
	STASIS_STAGE_DIR=$root "$STASIS" checkpoint "$pid" -D "$w/next" --leave-running ||
		{ fail "the next checkpoint was refused"; return 1; }
	[ -z "$(ls -A "$root")" ] || { fail "left in the staging root: $(ls "$root")"; return 1; }
	kill -TERM "$pid"
	reap "$pid"
}
