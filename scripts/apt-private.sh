# shellcheck shell=sh
# A private apt configuration for Debian's sid (or another suite), sourced
# by the fetch scripts: the machine's own apt sources stay untouched, and
# the mirror is the one the machine already uses. Sets work (a folder
# removed at exit) and defines apt_private, apt_cache and apt_suite.

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
