# shellcheck shell=bash
# A tree in namespaces of its own, kind by kind as unshare makes them,
# sourced by run: each is restored or refused before anything changes,
# never lost (README.md, on preflight).

# start_unshared DIR UNSHARE-OPTION...: the demo workload in DIR under
# setsid unshare; sets top (what was started: unshare, or the workload
# itself without --fork) and inner (the workload: unshare's child with
# --fork, else top) once it counts.
start_unshared() {
	local d=$1
	shift
	mkdir -p "$d"
	setsid unshare "$@" -- "$STASIS" __demo-workload "$d" 10 </dev/null >/dev/null 2>&1 &
	top=$!
	inner=$top
	PIDS+=("$top")
	wait_counter "$d" 5 || { fail "unshare $*: the workload does not count"; return 1; }
	case " $* " in
	*" --fork "*) inner=$(cut -d' ' -f1 "/proc/$top/task/$top/children") ;;
	esac
	PIDS+=("$inner")
}

# refused_unchanged DIR: after a refusal, no image and the workload counts on.
refused_unchanged() {
	local at
	grep -q "nothing was changed" "$TMP/stderr" || { fail "$(cat "$TMP/stderr")"; return 1; }
	[ ! -e "$1/img" ] || { fail "the refusal left $(find "$1/img")"; return 1; }
	at=$(counter "$1")
	wait_counter "$1" $((at + 5)) || { fail "the workload stopped after the refusal"; return 1; }
}

# Every kind that CRIU saves but cannot restore here (user, cgroup: the
# tree was lost), cannot save but in a container (mount), or saves only
# from the namespace's first process (PID, time), alone and combined; a
# process in another network namespace than its root's (lost too).
test_namespaces_refused() {
	local d="$TMP/nsref" i=0 opts which want pid holder init
	while IFS='|' read -r opts which want; do
		i=$((i + 1))
		# shellcheck disable=SC2086
		start_unshared "$d/$i" $opts || return 1
		pid=$top
		[ "$which" = inner ] && pid=$inner
		expect_error "PID $pid $want" "$STASIS" checkpoint "$pid" -D "$d/$i/img" || return 1
		echo "unshare $opts, PID $which: $(cat "$TMP/stderr")"
		refused_unchanged "$d/$i" || return 1
		kill_group "$inner"
		alive "$top" && kill_group "$top"
		reap "$top"
	done <<'EOF'
-U -r|top|(stasis) is in a user namespace of its own (user:\[[0-9]*\]): CRIU saves one but cannot restore it here
-U -r --fork|top|(unshare) is in a user namespace of its own
-U -r --fork|inner|(stasis) is in a user namespace of its own
-m|top|(stasis) is in a mount namespace of its own (mnt:\[[0-9]*\])
-C|top|(stasis) is in a cgroup namespace of its own (cgroup:\[[0-9]*\]): CRIU saves one but cannot restore it here
-p --fork|top|(unshare) makes its children in a new PID namespace (pid_for_children:
-T --fork|top|(unshare) makes its children in a new time namespace (time_for_children:
-p --fork --mount-proc|inner|(stasis) is in a mount namespace of its own
-p --fork -C|inner|(stasis) is in a cgroup namespace of its own
-U -r -p --fork|inner|(stasis) is in a user namespace of its own
-n -i -u -U -r|top|(stasis) is in a user namespace of its own
EOF
	# A child in a network namespace of its own, under a root in the host's.
	mkdir -p "$d/nested"
	# shellcheck disable=SC2016
	setsid sh -c 'unshare -n "$1" __demo-workload "$2" 10 & while :; do sleep 0.2; done' sh \
		"$STASIS" "$d/nested" </dev/null >/dev/null 2>&1 &
	top=$!
	PIDS+=("$top")
	wait_counter "$d/nested" 5 || { fail "the nested workload does not count"; return 1; }
	inner=$(awk '/^start/ { print $3 }' "$d/nested/log")
	expect_error "PID $inner (stasis) is in another network namespace (net:\[[0-9]*\]) than the tree's root, PID $top" \
		"$STASIS" checkpoint "$top" -D "$d/nested/img" || return 1
	refused_unchanged "$d/nested" || return 1
	kill_group "$top"
	alive "$inner" && kill_group "$inner"
	reap "$top"
	# A tree entered into another tree's PID namespace (nsenter, as docker
	# exec does), not as its first process.
	setsid unshare -p --fork sleep 1000 </dev/null >/dev/null 2>&1 &
	holder=$!
	PIDS+=("$holder")
	for _ in $(seq 100); do
		init=$(cut -d' ' -f1 "/proc/$holder/task/$holder/children" 2>/dev/null)
		[ -n "$init" ] && break
		sleep 0.02
	done
	mkdir -p "$d/entered"
	setsid nsenter -t "$init" -p -- "$STASIS" __demo-workload "$d/entered" 10 </dev/null >/dev/null 2>&1 &
	top=$!
	PIDS+=("$top")
	wait_counter "$d/entered" 5 || { fail "the entered workload does not count"; return 1; }
	inner=$(cut -d' ' -f1 "/proc/$top/task/$top/children")
	expect_error "PID $inner (stasis) is in a PID namespace of its own (pid:\[[0-9]*\]) as its PID 2, not as its first process" \
		"$STASIS" checkpoint "$inner" -D "$d/entered/img" || return 1
	refused_unchanged "$d/entered" || return 1
	kill_group "$holder"
	alive "$inner" && kill_group "$inner"
	reap "$holder"
	reap "$top"
}

# Network, IPC, UTS and time namespaces of the tree's own, and a PID
# namespace whose first process is the tree's root: checkpointed,
# restored in namespaces of their own again, the count goes on unbroken.
test_namespaces_restored() {
	local d="$TMP/nsok" i=0 opts which kinds pid at restored k
	while IFS='|' read -r opts which kinds; do
		i=$((i + 1))
		# shellcheck disable=SC2086
		start_unshared "$d/$i" $opts || return 1
		pid=$top
		[ "$which" = inner ] && pid=$inner
		"$STASIS" checkpoint "$pid" -D "$d/$i/img" || { fail "unshare $opts: checkpoint"; return 1; }
		reap "$top"
		at=$(counter "$d/$i")
		restored=$("$STASIS" restore -D "$d/$i/img" --detach) || { fail "unshare $opts: restore"; return 1; }
		PIDS+=("$restored")
		wait_counter "$d/$i" $((at + 20)) || { fail "unshare $opts: the restored workload does not count"; return 1; }
		for k in $kinds; do
			[ "$(readlink "/proc/$restored/ns/$k")" != "$(readlink "/proc/self/ns/$k")" ] ||
				{ fail "unshare $opts: restored in the host's $k namespace"; return 1; }
		done
		echo "unshare $opts, PID $which: restored as $restored, own $kinds, counted $at -> $(counter "$d/$i")"
		log_is_continuous "$d/$i" || return 1
		kill_group "$restored"
	done <<'EOF'
-n|top|net
-i|top|ipc
-u|top|uts
-n -i -u|top|net ipc uts
-p --fork|inner|pid
-T --fork|inner|time
-p --fork -n -i -u -T|inner|pid net ipc uts time
EOF
}

# fake_tree_intact DIR: every process the fake driver knows (by its PID
# in its own PID namespace) unlocked and counting, its memory intact.
fake_tree_intact() {
	local d=$1 f p before
	for f in "$d"/cuda/*; do
		p=${f##*/}
		case $p in *[!0-9]*) continue ;; esac
		[ "$(cat "$d/cuda/$p")" = 0 ] || { fail "process $p in state $(cat "$d/cuda/$p")"; return 1; }
		before=$(cat "$d/w/count-$p")
		sleep 0.1
		[ "$(cat "$d/w/count-$p")" \> "$before" ] || { fail "process $p stopped counting"; return 1; }
	done
	[ -z "$(ls "$d"/w/bad-* 2>/dev/null)" ] || { fail "memory changed: $(cat "$d"/w/bad-*)"; return 1; }
}

# A CUDA process (the fake driver) in a user namespace of its own is
# refused before its lock, and stasis ps says why; in a PID namespace of
# its own too, where a restore here would give it PIDs the GPU restore
# does not know.
test_namespaces_gpu_refused() {
	local d="$TMP/nsgpu" pid p opts want
	fake_env "$d"
	while IFS='|' read -r opts want; do
		rm -f "$d"/cuda/* "$d"/w/*
		# shellcheck disable=SC2086
		setsid unshare $opts -- "$WORKER" "$d/w" 4 </dev/null >/dev/null 2>&1 &
		top=$!
		PIDS+=("$top")
		for _ in $(seq 100); do [ "$(ls "$d/cuda" | wc -l)" -ge 5 ] && break; sleep 0.02; done
		pid=$top
		[ "$(readlink "/proc/$top/exe")" = "$WORKER" ] || pid=$(cut -d' ' -f1 "/proc/$top/task/$top/children")
		PIDS+=("$pid")
		expect_error "PID $pid (fake-cuda-worke) $want" "$STASIS" checkpoint "$pid" -D "$d/img" || return 1
		echo "unshare $opts: $(cat "$TMP/stderr")"
		[ ! -e "$d/img" ] || { fail "the refusal left $(find "$d/img")"; return 1; }
		"$STASIS" ps >"$d/ps"
		for p in $(tree_pids "$pid"); do
			grep -q "^$p .*BLOCKED (namespaces): .* namespace of its own" "$d/ps" || { fail "ps: $(cat "$d/ps")"; return 1; }
		done
		fake_tree_intact "$d" || return 1
		kill_group "$pid"
		alive "$top" && kill_group "$top"
		reap "$top"
	done <<'EOF'
-U -r|is in a user namespace of its own
-p --fork|uses CUDA in a PID namespace of its own
EOF
}
