#!/bin/sh
# Build the tests' CRI client (tests/tools/cri-client), statically linked,
# from Debian's own Go packages: sid's Go toolchain (its binaries are
# static, so they run on bookworm) and the -dev packages of the client's
# import graph, fetched as .debs through the private apt configuration
# (apt-private.sh), unpacked into a scratch folder and built offline in
# GOPATH mode, the way Debian builds Go packages. The versions are sid's
# current ones; the .debs are kept in DOWNLOADDIR and taken from there
# afterwards. The scratch folder (apt-private.sh's, with the Go build
# cache) goes at exit.
#
# usage: build-cri-client.sh DOWNLOADDIR OUTPUT_BINARY
set -eu

# The Go libraries the client's import graph needs (go list -deps), by the
# Debian package that has them. The toolchain, golang-1.NN-go and
# golang-1.NN-src, is the one sid's golang-go depends on.
PACKAGES="
golang-k8s-cri-api-dev
golang-google-grpc-dev
golang-google-protobuf-dev
golang-github-golang-protobuf-1-5-dev
golang-google-genproto-dev
golang-golang-x-net-dev
golang-golang-x-sys-dev
golang-golang-x-text-dev
"
SUITE=sid

if [ $# -ne 2 ]; then
	echo "usage: build-cri-client.sh DOWNLOADDIR OUTPUT_BINARY" >&2
	exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../tests/tools/cri-client" && pwd)
output=$2
# Up to date: newer than the source and this script.
if [ -f "$output" ] &&
	[ -n "$(find "$output" -newer "$src/main.go" -newer "$here/build-cri-client.sh")" ]; then
	exit 0
fi
mkdir -p "$1" "$(dirname "$output")"
downloads=$(cd "$1" && pwd)
output=$(cd "$(dirname "$output")" && pwd)/$(basename "$output")

# shellcheck source=apt-private.sh
. "$here/apt-private.sh"

# fetch PACKAGE: apt_fetch's, any version, from the suite.
fetch() { apt_fetch "$downloads" "$1" "" "$SUITE"; }

# The toolchain: the one already downloaded, or sid's golang-go's.
go_pkg=$(cd "$downloads" && ls golang-1.*-go_*.deb 2>/dev/null | sed 's/_.*//' | sort -t. -k2,2n | tail -n1)
if [ -z "$go_pkg" ]; then
	apt_suite deb "$SUITE" || { echo "build-cri-client: could not read $SUITE's index" >&2; exit 1; }
	apt_suite_ready=$SUITE
	go_pkg=$(apt_cache depends golang-go 2>/dev/null |
		sed -n 's/^ *Depends: \(golang-1\.[0-9]*-go\)$/\1/p' | head -n1)
	if [ -z "$go_pkg" ]; then
		echo "build-cri-client: no golang-1.NN-go in $SUITE's golang-go dependencies" >&2
		exit 1
	fi
fi

x=$work/x
mkdir -p "$x"
for p in "$go_pkg" "${go_pkg%-go}-src" $PACKAGES; do
	fetch "$p"
	dpkg-deb -x "$deb" "$x"
done

goroot=$(ls -d "$x"/usr/lib/go-1.*/ | head -n1)
goroot=${goroot%/}
go=$goroot/bin/go
GOROOT=$goroot
GOPATH=$x/usr/share/gocode
GO111MODULE=off
GOTOOLCHAIN=local
GOPROXY=off
GOENV=off
GOFLAGS=-trimpath
GOCACHE=$work/cache
CGO_ENABLED=0
export GOROOT GOPATH GO111MODULE GOTOOLCHAIN GOPROXY GOENV GOFLAGS GOCACHE CGO_ENABLED

cd "$src"
if [ -n "$("$goroot/bin/gofmt" -l .)" ]; then
	echo "build-cri-client: $src is not gofmt-formatted" >&2
	exit 1
fi
"$go" vet .
"$go" build -ldflags "-s -w" -o "$output.tmp" .
mv "$output.tmp" "$output"
echo "build-cri-client: $output ($("$go" version | cut -d' ' -f3), $(wc -c <"$output") bytes)"
