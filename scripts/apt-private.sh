# shellcheck shell=sh
# A private apt configuration for Debian's sid (or another suite), sourced
# by the fetch scripts: the machine's own apt sources stay untouched, and
# the mirror is the one the machine already uses. Sets work (a folder
# removed at exit) and defines apt_private, apt_cache, apt_suite and
# apt_fetch.

mirror_from_apt() {
	# deb822 sources first, then one-line sources; skip the security archive.
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }' "$f"
	done
}

mirror=$(mirror_from_apt | grep -v -e security -e '^$' | grep '/debian/*$' | head -n1)
if [ -z "$mirror" ]; then
	echo "$(basename "$0"): no Debian mirror found in the apt configuration" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

apt_opts() {
	echo -o Dir::Etc::SourceList="$work/sources.list" \
		-o Dir::Etc::SourceParts=/dev/null \
		-o Dir::State::Lists="$work/lists" \
		-o Dir::Cache="$work/cache" \
		-o APT::Sandbox::User=root
}

# shellcheck disable=SC2046
apt_private() { apt-get -q $(apt_opts) "$@"; }

# shellcheck disable=SC2046
apt_cache() { apt-cache $(apt_opts) "$@"; }

# apt_suite TYPE SUITE: the private configuration reads SUITE's TYPE (deb
# or deb-src) index, signed by Debian's archive key.
apt_suite() {
	echo "$1 [signed-by=$keyring] $mirror $2 main" >"$work/sources.list"
	apt_private update >/dev/null
}

# apt_fetch DOWNLOADS PACKAGE UPSTREAM SUITES: PACKAGE's .deb of that
# upstream version (any, where UPSTREAM is empty) from the first of SUITES
# (words) that has it, into DOWNLOADS once; its path in deb. Not to be run
# in a subshell: an exit ends the script, and the suite read
# (apt_suite_ready) stays for the next call.
apt_suite_ready=""
apt_fetch() {
	deb=$(ls "$1/$2"_"$3"*.deb 2>/dev/null | head -n1)
	[ -n "$deb" ] && return 0
	version=""
	for suite in $4; do
		[ "$apt_suite_ready" = "$suite" ] || apt_suite deb "$suite" || continue
		apt_suite_ready=$suite
		version=$(apt_cache madison "$2" 2>/dev/null |
			awk -v v="$3" '{ gsub(/ /, "", $3) } v == "" || index($3, v "+") == 1 || index($3, v "-") == 1 { print $3; exit }')
		[ -n "$version" ] && break
	done
	if [ -z "$version" ]; then
		echo "$(basename "$0"): $2 $3 is not in $4" >&2
		exit 1
	fi
	(cd "$work" && apt_private download "$2=$version" >/dev/null 2>&1) ||
		{ echo "$(basename "$0"): could not download $2 $version" >&2; exit 1; }
	mv "$work/$2"_*.deb "$1/"
	deb=$(ls "$1/$2"_"$3"*.deb | head -n1)
}
