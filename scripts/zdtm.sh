#!/bin/sh
# make zdtm: prove stasis's CRIU patches the way CRIU proves itself. CRIU's
# own test suite (zdtm, from the same verified tarball) runs the tests in
# tests/zdtm/list, and stasis's own ones (tests/zdtm/*.c), once with
# upstream's CRIU and once with the patched one under the settings stasis
# runs it with. A test that passes with upstream's and fails with the
# patched one fails the target; one that fails with both is reported only
# (this machine may lack what it needs).
#
# usage: zdtm.sh [BUILDDIR]
# ZDTM_FORCE=1 runs the tests again where nothing changed since they last
# passed; ZDTM_TIMEOUT is each run's limit in seconds (180).
set -eu

VERSION=4.2.1
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
tests=$root/tests/zdtm
case $build in /*) ;; *) build=$root/$build ;; esac
work=$build/zdtm
tree=$work/criu-$VERSION
logs=$work/logs
timeout_s=${ZDTM_TIMEOUT:-180}

# zdtm.py and the zdtm_ct it starts ask for python3 through PATH, and need
# Debian's, with python3-yaml and python3-protobuf (scripts/deps.sh): not
# an interpreter of a user's own that comes first.
PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export PATH

# Hardware breakpoints never fire in some virtual machines, where CRIU's
# dump waits for them for ever; CRIU's fault 130 does without them, and
# works where they do too. A CRIU_FAULT of the caller's (even empty) stays.
CRIU_FAULT=${CRIU_FAULT-130}
export CRIU_FAULT

# Both CRIUs: upstream's in the prefix the GPU bundle uses for its
# reference, the patched one where make puts it. Each is built only when
# missing or made from other patches.
stock=$build/criu-stock/sbin/criu
patched=$build/criu/sbin/criu
"$root/scripts/build-criu.sh" "$build/downloads" "$build/criu-stock-build" "$build/criu-stock" stock
"$root/scripts/build-criu.sh" "$build/downloads" "$build/criu-build" "$build/criu"

# The settings stasis runs its CRIU with (src/lib/criu/criu-rpc.c): a page
# writer a CPU (at most 8; at least 2 here, so that the writers run on a
# machine of one CPU too), chunks for a task too big for its pipes, parts
# off unless staged, and at least 4 fill threads (CRIU takes no more than
# the CPUs).
cpus=$(nproc 2>/dev/null || echo 1)
writers=$cpus
[ "$writers" -gt 8 ] && writers=8
[ "$writers" -lt 2 ] && writers=2
fill=$cpus
[ "$fill" -gt 16 ] && fill=16
[ "$fill" -lt 4 ] && fill=4
settings="CRIU_PAGE_WRITERS=$writers CRIU_PAGE_WRITER_CHUNKS=1 CRIU_PAGE_WRITER_PARTS= CRIU_FILL_THREADS=$fill CRIU_GHOST_ROOT_FOLDERS=1"
# "chunks": RLIMIT_NOFILE such that 256 MiB in 1 MiB pipes does not fit in
# three quarters of it (tests/zdtm/criu-wrap).
chunks_nofile=512

# zdtm.py runs each test as uid 18943 unless the test says otherwise, and
# CRIU needs CAP_SYS_RESOURCE to read the rlimits of another user's task:
# where root lacks it (some container and VM sandboxes), every such dump
# fails with "Can't get rlimit" whatever the CRIU. There the tests run as
# root instead (zdtm.py is taught ZDTM_TESTS_AS_ROOT below); the tests that
# change their own uid still fail, with both CRIUs.
capeff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
as_root=0
[ $((0x$capeff >> 24 & 1)) -eq 1 ] || as_root=1

# The results are a function of these: where none changed since the tests
# last passed, they are not run again.
key=$({
	echo "$VERSION $(uname -r) $CRIU_FAULT $settings $chunks_nofile $as_root"
	cat "$stock" "$patched" "$0" "$tests"/*
} | sha256sum | cut -d' ' -f1)
if [ "${ZDTM_FORCE:-0}" != 1 ] && [ -f "$work/summary" ] &&
	[ "$(cat "$work/passed-key" 2>/dev/null)" = "$key" ]; then
	# The failures with both and the counts; the whole table is in the file.
	awk '/^zdtm: (failing|[0-9]+ tests)/ { on = 1 } on' "$work/summary"
	echo "zdtm: nothing changed since these results (${work#"$root"/}/summary; ZDTM_FORCE=1 runs them again)"
	exit 0
fi
rm -f "$work/passed-key"

# The suite's tree, extracted from the tarball that CRIU is built from, once
# for each version of this script.
recipe=$(sha256sum <"$0" | cut -d' ' -f1)
if [ "$(cat "$tree/.stasis-ready" 2>/dev/null)" != "$recipe" ]; then
	echo "zdtm: extracting CRIU $VERSION's test suite"
	rm -rf "$tree"
	mkdir -p "$work"
	# Without --no-same-permissions root keeps the tarball's 0775 folders,
	# in which stasis's CRIU (CRIU_GHOST_ROOT_FOLDERS) refuses ghost files.
	tar -xJf "$build/downloads/criu_$VERSION.orig.tar.xz" -C "$work" --no-same-permissions
	zdtm_py=$tree/test/zdtm.py
	# The one change to upstream's harness: ZDTM_TESTS_AS_ROOT=1 keeps the
	# tests root, as a test marked suid is (see above).
	sed -i "s/^\( *\)if not test_flag(self.__desc, 'suid'):\$/\1if not test_flag(self.__desc, 'suid') and os.environ.get('ZDTM_TESTS_AS_ROOT') != '1':/" "$zdtm_py"
	grep -q ZDTM_TESTS_AS_ROOT "$zdtm_py" || { echo "zdtm: zdtm.py did not take ZDTM_TESTS_AS_ROOT" >&2; exit 1; }
	# pycriu (which zdtm.py imports) is made by CRIU's lib/Makefile, whose
	# top-level target would build all of CRIU first: ask for its Python
	# part alone, in CRIU's own build environment.
	# shellcheck disable=SC2016
	printf 'zdtm-pycriu:\n\t$(Q) $(MAKE) $(build)=lib lib-py\n' |
		make -s -C "$tree" PYTHON=/usr/bin/python3 -f Makefile -f - zdtm-pycriu >"$work/build.log" 2>&1 ||
		{ tail -n 20 "$work/build.log" >&2; exit 1; }
	# The harness's helpers and the tests' library, which zdtm.py would
	# otherwise make in the middle of the first test (all of zdtm's tests,
	# for the library).
	{ make -s -C "$tree/test" umount2 zdtm_ct && make -s -C "$tree/test/zdtm/lib"; } >>"$work/build.log" 2>&1 ||
		{ tail -n 20 "$work/build.log" >&2; exit 1; }
	echo "$recipe" >"$tree/.stasis-ready"
fi

# stasis's own tests beside upstream's; copied with their times, so make
# rebuilds them only when they change.
mkdir -p "$tree/test/zdtm/stasis"
for f in "$tests"/*.c "$tests"/*.h; do
	cp -p "$f" "$tree/test/zdtm/stasis/"
done
cp -p "$tests/stasis.mk" "$tree/test/zdtm/stasis/Makefile"
# zdtm.py runs its --criu-bin itself: a copy that is surely executable.
install -m 755 "$tests/criu-wrap" "$work/criu-wrap"

list=$(grep -v -e '^#' -e '^[[:space:]]*$' "$tests/list")
bad=$(echo "$list" | awk 'NF > 2 || (NF == 2 && $2 != "parts" && $2 != "chunks")')
[ -z "$bad" ] || { echo "zdtm: tests/zdtm/list: unknown settings: $bad" >&2; exit 1; }
names=$(echo "$list" | awk '{ print $1 }' | sort -u)
for dir in static transition stasis; do
	want=$(echo "$names" | sed -n "s|^zdtm/$dir/||p" | tr '\n' ' ')
	[ -n "$want" ] || continue
	# shellcheck disable=SC2086
	make -s -j"$cpus" -C "$tree/test/zdtm/$dir" $want >>"$work/build.log" 2>&1 ||
		{ tail -n 20 "$work/build.log" >&2; exit 1; }
done

# One zdtm.py run per test and CRIU, each under a time limit: timeout
# signals its process group, and the test's PID namespace goes with the
# zdtm.py that is its init. Images and logs are kept, so that the patched
# paths can be looked for in the logs; the images are dropped after.
# usage: run_zdtm TEST LABEL CRIU [VARIABLE=VALUE...]; prints the result.
run_zdtm() {
	t=$1 label=$2 criu=$3
	shift 3
	out=$logs/$label/$t
	rm -rf "$out" "$tree/test/dump/$t"
	mkdir -p "$out"
	rc=0
	(cd "$tree/test" && env "$@" ZDTM_TESTS_AS_ROOT=$as_root ZDTM_CRIU="$criu" \
		timeout -k 10 "$timeout_s" ./zdtm.py run -t "$t" -f h --keep-going --ignore-taint \
		-k always --criu-bin "$work/criu-wrap" >"$out/zdtm.log" 2>&1) || rc=$?
	if [ -d "$tree/test/dump/$t" ]; then
		find "$tree/test/dump/$t" -name '*.log' -exec cp {} "$out/" \;
		rm -rf "$tree/test/dump/$t"
	fi
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo timeout
	elif grep -q "^Skipping $t " "$out/zdtm.log"; then
		echo skip
	elif [ "$rc" -eq 0 ]; then
		echo pass
	else
		echo fail
	fi
}

# Why a run failed, in one line: where zdtm.py says it failed, and CRIU's
# first error that is not the noise of a machine without CAP_SYS_RESOURCE
# (else the test's own complaint).
why() {
	dir=$logs/$1/$2
	if grep -q "^Skipping $2 " "$dir/zdtm.log"; then
		sed -n "s|^Skipping $2 |skipped |p" "$dir/zdtm.log" | head -n1
		return
	fi
	at=$(sed -n 's/^#* Test .* FAIL at \(.*\) #*$/\1/p' "$dir/zdtm.log" | head -n1)
	err=$(cat "$dir"/dump.log "$dir"/restore.log 2>/dev/null | grep -o 'Error ([^)]*): .*' |
		grep -v 'RLIMIT_NOFILE for self' | head -n1)
	[ -n "$err" ] || err=$(grep -o 'ERR: .*\|FAIL: .*' "$dir/zdtm.log" | head -n1)
	echo "${at:-no result}${err:+: $err}"
}

# Whether the patched CRIU took the code path that a setting is there for,
# by the lines the patches log (stasis's own tests only).
# usage: path_taken TEST SETTING; prints what is missing.
path_taken() {
	dir=$logs/patched${2:+-$2}/$1
	need="Page writer [0-9]* writes the pages of"
	case ${2:-} in
	parts) need="Page writer [0-9]* writes part [0-9]* of the pages of" ;;
	chunks) need="Page writer [0-9]* writes the pages of [0-9]* (a chunk)" ;;
	esac
	grep -q "$need" "$dir/dump.log" 2>/dev/null || echo "no '$need' in dump.log"
	# Fill threads: never more than the CPUs, so none on a machine of one.
	if [ "$cpus" -gt 1 ] && ! grep -Eq 'queued pages in [0-9]+ chunks from ([2-9]|[1-9][0-9]+) threads' \
		"$dir/restore.log" 2>/dev/null; then
		echo "no fill threads in restore.log"
	fi
}

# The machine's own settings: stasis's CRIU needs no kernel setting for a
# ghost file in a sticky folder (CRIU_GHOST_ROOT_FOLDERS), and neither
# CRIU's run changes one.
echo "zdtm: fs.protected_symlinks=$(cat /proc/sys/fs/protected_symlinks) fs.protected_hardlinks=$(cat /proc/sys/fs/protected_hardlinks)"
echo "zdtm: $(echo "$list" | wc -l) tests with upstream's CRIU $VERSION and stasis's ($settings)"
[ "$as_root" -eq 0 ] || echo "zdtm: no CAP_SYS_RESOURCE here: the tests run as root"
echo "stock   patched test"
rm -rf "$logs"
table=$work/results
stock_of=$work/stock-results
: >"$table"
: >"$stock_of"
echo "$list" | while read -r name setting; do
	# Upstream's CRIU runs each test once, whatever the settings.
	stock_result=$(awk -v t="$name" '$1 == t { print $2 }' "$stock_of")
	if [ -z "$stock_result" ]; then
		stock_result=$(run_zdtm "$name" stock "$stock")
		echo "$name $stock_result" >>"$stock_of"
	fi
	label=patched${setting:+-$setting}
	case ${setting:-} in
	"") extra="" ;;
	parts) extra=CRIU_PAGE_WRITER_PARTS=1 ;;
	chunks) extra=ZDTM_DUMP_NOFILE=$chunks_nofile ;;
	esac
	# shellcheck disable=SC2086
	patched_result=$(run_zdtm "$name" "$label" "$patched" $settings $extra)
	note=""
	case $name in zdtm/stasis/*)
		if [ "$patched_result" = pass ]; then
			missing=$(path_taken "$name" "${setting:-}" | paste -sd ';' -)
			[ -z "$missing" ] || { patched_result=fail; note="path not taken: $missing"; }
		fi ;;
	esac
	stock_why="" patched_why=""
	[ "$stock_result" = pass ] || stock_why=$(why stock "$name")
	[ "$patched_result" = pass ] || [ -n "$note" ] || patched_why=$(why "$label" "$name")
	if [ -n "$stock_why" ] && [ "$stock_why" = "$patched_why" ]; then
		note="both: $stock_why"
	else
		[ -z "$patched_why" ] || note="patched: $patched_why${note:+; $note}"
		[ -z "$stock_why" ] || note="stock: $stock_why${note:+; $note}"
	fi
	printf '%-7s %-7s %s%s%s\n' "$stock_result" "$patched_result" "$name" "${setting:+ ($setting)}" \
		"${note:+  -- $note}" | tee -a "$table"
done

# The counts, from the table: the loop ran in a pipeline's subshell.
total=0 stock_passed=0 patched_passed=0 differ=0 broken=0
both_failed=""
while read -r s p rest; do
	total=$((total + 1))
	[ "$s" != pass ] || stock_passed=$((stock_passed + 1))
	[ "$p" != pass ] || patched_passed=$((patched_passed + 1))
	[ "$s" = "$p" ] || differ=$((differ + 1))
	[ "$s" != pass ] || [ "$p" = pass ] || broken=$((broken + 1))
	[ "$s" = pass ] || [ "$p" = pass ] || both_failed="$both_failed
  $rest"
done <"$table"

tail=$work/summary.tail
{
	[ -z "$both_failed" ] || echo "zdtm: failing with both CRIUs (not the patches):$both_failed"
	echo "zdtm: $total tests, stock $stock_passed passed, patched $patched_passed passed, $differ differ"
} >"$tail"
cat "$tail"
{
	echo "zdtm: results (logs in ${logs#"$root"/}):"
	echo "  stock   patched test"
	sed 's/^/  /' "$table"
	cat "$tail"
} >"$work/summary"
rm -f "$tail"
if [ "$broken" -gt 0 ]; then
	echo "zdtm: $broken tests pass with upstream's CRIU and fail with stasis's (logs in ${logs#"$root"/})" >&2
	exit 1
fi
echo "$key" >"$work/passed-key"
