#!/usr/bin/env bash
# The libraries liblayercake links, built for the manylinux wheel: ZeroMQ
# (with libsodium inside it, for CURVE), libmicrohttpd, libcurl (HTTP only)
# and json-c, from Debian bookworm's source packages (the upstream tarball and
# Debian's patches, security fixes included), compiled by zig for glibc 2.28
# (manylinux_2_28) as shared libraries with their own sonames. UCX is not
# built: the wheel loads a UCX found at run time (src/transport/ucx/dl.c); its
# headers are copied from the build host's libucx-dev.
#   scripts/wheel-deps.sh VENV   -> prints the prefix (include/, lib/, bin/)
# VENV is the toolchain's venv (scripts/py-venv.sh wheel
# python/requirements-wheel.txt: ziglang). Everything is cached outside the
# checkout under $LAYERCAKE_CACHE (default ~/.cache/layercake): the sources
# in sources/, the zig cache in zig-cache/, the prefix in
# wheel-deps-<key>/ (key: this script's commands and zig's version). The
# first run downloads ~9 MB from deb.debian.org and compiles: about 5 minutes
# of CPU (22 minutes of wall time measured on 2 cores shared with other
# builds); later runs print the prefix at once. Concurrent callers wait for
# each other (flock).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 VENV" >&2; exit 2; }
venv=$1
zig=$("$venv/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
[ -x "$zig" ] || { echo "wheel-deps: no zig in $venv (ziglang)" >&2; exit 1; }
cache=${LAYERCAKE_CACHE:-${HOME:-/root}/.cache/layercake}
# The key: this script's commands (not its comments) and zig's version.
key=$( (grep -v '^[[:space:]]*#' "$0"; "$zig" version) | sha256sum | cut -c1-12)
out=$cache/wheel-deps-$key
glibc=2.28
target=x86_64-linux-gnu.$glibc
jobs=${JOBS:-$(nproc)}
mkdir -p "$cache/sources"
# libsodium's Debian source is a git tag without configure: autotools make it.
if ! command -v autoreconf >/dev/null || ! command -v libtoolize >/dev/null; then
	[ "$(id -u)" = 0 ] && apt-get install -y -q autoconf automake libtool >&2 ||
		{ echo "wheel-deps: autoconf, automake and libtool are needed (apt-get install them)" >&2; exit 1; }
fi
exec 9>"$cache/.wheel-deps.lock"
flock 9
if [ -f "$out/.done" ]; then
	echo "$out/prefix"
	exit 0
fi
rm -rf "$cache"/wheel-deps-* # an older key's prefix
mkdir -p "$out/bin" "$out/prefix/include" "$out/prefix/lib/pkgconfig" "$out/src"
prefix=$out/prefix
log=$out/build.log
echo "wheel-deps: building into $out (log: $log)" >&2

# The compilers: zig for glibc 2.28, never sanitizing (zig's default at -O0).
export ZIG_GLOBAL_CACHE_DIR=$cache/zig-cache ZIG_LOCAL_CACHE_DIR=$cache/zig-cache
for t in cc c++; do
	printf '#!/bin/sh\nexec "%s" %s -target %s -fno-sanitize=all "$@"\n' "$zig" "$t" "$target" >"$out/bin/$t"
done
for t in ar ranlib; do
	printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$t" >"$out/bin/$t"
done
chmod +x "$out/bin"/*
export CC=$out/bin/cc CXX=$out/bin/c++ AR=$out/bin/ar RANLIB=$out/bin/ranlib
export PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig PKG_CONFIG_PATH=
# lld refuses a version script naming a symbol that is not defined (json-c).
export CFLAGS="-O2 -g0" CXXFLAGS="-O2 -g0" LDFLAGS="-Wl,--undefined-version"

# name version url-path sha256 (Debian's pool: the .orig tarball, then the
# .debian tarball whose debian/patches/series is applied).
fetch() {
	local file=$1 sum=$2 url=http://deb.debian.org/debian/pool/main/$3/$1
	if ! echo "$sum  $cache/sources/$file" | sha256sum -c --quiet 2>/dev/null; then
		echo "wheel-deps: downloading $url" >&2
		curl -fsSL -o "$cache/sources/$file.tmp" "$url"
		mv "$cache/sources/$file.tmp" "$cache/sources/$file"
		echo "$sum  $cache/sources/$file" | sha256sum -c --quiet
	fi
}
# unpack DIR ORIG DEBIAN [SKIP-PATCH...]: the source tree with Debian's patches.
unpack() {
	local dir=$out/src/$1 orig=$2 deb=$3 p
	shift 3
	mkdir -p "$dir"
	tar -C "$dir" --strip-components=1 -xf "$cache/sources/$orig"
	tar -C "$dir" -xf "$cache/sources/$deb"
	while read -r p _; do
		case "$p" in "" | \#*) continue ;; esac
		for s in "$@"; do [ "$p" = "$s" ] && continue 2; done
		patch -d "$dir" -p1 -s -N <"$dir/debian/patches/$p" >>"$log"
	done <"$dir/debian/patches/series"
	echo "$dir"
}
cmake_build() {
	local src=$1
	shift
	cmake -S "$src" -B "$src/_build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
		-DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
		-DCMAKE_AR="$AR" -DCMAKE_RANLIB="$RANLIB" -DCMAKE_PREFIX_PATH="$prefix" "$@" >>"$log"
	cmake --build "$src/_build" -j"$jobs" >>"$log"
	cmake --install "$src/_build" >>"$log"
}

fetch libsodium_1.0.18.orig.tar.gz d59323c6b712a1519a5daf710b68f5e7fde57040845ffec53850911f10a5d4f4 libs/libsodium
fetch libsodium_1.0.18-1+deb12u1.debian.tar.xz f410474e46346b06b162defa05b1be26906aeed6cf309e3d4ebe30b4d1350733 libs/libsodium
fetch zeromq3_4.3.4.orig.tar.gz 0ff5a531c9ffaf0dfdc7dc78d13d1383088f454896d252934c429b2554d10559 z/zeromq3
fetch zeromq3_4.3.4-6.debian.tar.xz fbb0dcb4ffbf483d416d9af722db74ad4edd7004625ce10381e8cd3a71b6cd58 z/zeromq3
fetch libmicrohttpd_0.9.75.orig.tar.xz 796e7e217a4802679fcac667a4e98501c53185dcf50ca0583870e84192620131 libm/libmicrohttpd
fetch libmicrohttpd_0.9.75-6.debian.tar.xz 566c247bfbf67e20858705ae695f58db747d50ed8512f2bc46a28bef9086e5af libm/libmicrohttpd
fetch curl_7.88.1.orig.tar.gz cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7 c/curl
fetch curl_7.88.1-10+deb12u15.debian.tar.xz 961b78bc48492c5693e4decb352ddd176f343260a8956f48b2887874048ef23b c/curl
fetch json-c_0.16.orig.tar.gz 3ecaeedffd99a60b1262819f9e60d7d983844073abc74e495cb822b251904185 j/json-c
fetch json-c_0.16-2.debian.tar.xz 64e4334da662d62b735a876567620121f9f07cac9ad01f989034cbcf45c8ac84 j/json-c

# json-c (CMake).
echo "wheel-deps: json-c" >&2
src=$(unpack json-c json-c_0.16.orig.tar.gz json-c_0.16-2.debian.tar.xz 0002-doxygen.patch)
cmake_build "$src" -DBUILD_SHARED_LIBS=ON -DBUILD_STATIC_LIBS=OFF -DBUILD_TESTING=OFF -DDISABLE_WERROR=ON \
	-DBUILD_APPS=OFF

# libsodium, static and position-independent: it goes inside libzmq.
echo "wheel-deps: libsodium" >&2
src=$(unpack libsodium libsodium_1.0.18.orig.tar.gz libsodium_1.0.18-1+deb12u1.debian.tar.xz)
(cd "$src" && autoreconf -fi >>"$log" 2>&1 && ./configure --prefix="$prefix" --libdir="$prefix/lib" --disable-shared --enable-static --with-pic \
	--host=x86_64-linux-gnu >>"$log" && make -j"$jobs" >>"$log" && make install >>"$log")

# ZeroMQ with CURVE from libsodium (CMake; zig's libc++ linked in statically).
echo "wheel-deps: zeromq" >&2
src=$(unpack zeromq zeromq3_4.3.4.orig.tar.gz zeromq3_4.3.4-6.debian.tar.xz)
cmake_build "$src" -DBUILD_SHARED=ON -DBUILD_STATIC=OFF -DBUILD_TESTS=OFF -DWITH_DOCS=OFF -DWITH_PERF_TOOL=OFF \
	-DENABLE_DRAFTS=OFF -DENABLE_CURVE=ON -DWITH_LIBSODIUM=ON -DWITH_LIBSODIUM_STATIC=ON \
	-DENABLE_CPACK=OFF -DZMQ_BUILD_TESTS=OFF -DWITH_TLS=OFF -DWITH_NSS=OFF \
	-DSODIUM_INCLUDE_DIRS="$prefix/include" -DSODIUM_LIBRARIES="$prefix/lib/libsodium.a"

# libmicrohttpd without HTTPS (autotools as shipped).
echo "wheel-deps: libmicrohttpd" >&2
src=$(unpack libmicrohttpd libmicrohttpd_0.9.75.orig.tar.xz libmicrohttpd_0.9.75-6.debian.tar.xz)
(cd "$src" && ./configure --prefix="$prefix" --libdir="$prefix/lib" --host=x86_64-linux-gnu --disable-static \
	--disable-https --without-gnutls --disable-curl --disable-doc --disable-examples --disable-tools \
	>>"$log" && make -j"$jobs" >>"$log" && make install >>"$log")

# libcurl, HTTP only (the bootstrap client speaks plain HTTP), without the
# patches Debian keeps for its gnutls and nss flavours.
echo "wheel-deps: curl" >&2
src=$(unpack curl curl_7.88.1.orig.tar.gz curl_7.88.1-10+deb12u15.debian.tar.xz 90_gnutls.patch 99_nss.patch)
cmake_build "$src" -DBUILD_SHARED_LIBS=ON -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF -DHTTP_ONLY=ON \
	-DCURL_ENABLE_SSL=OFF -DCURL_USE_OPENSSL=OFF -DCURL_ZLIB=OFF -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF \
	-DUSE_NGHTTP2=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBPSL=OFF -DCURL_DISABLE_LDAP=ON \
	-DENABLE_MANUAL=OFF -DCURL_CA_BUNDLE=none -DCURL_CA_PATH=none

# UCX's headers only, and a ucx.pc that links nothing (UCX is loaded at run time).
for d in ucp ucs uct ucm; do
	[ -d /usr/include/$d ] || { echo "wheel-deps: no /usr/include/$d (apt-get install libucx-dev)" >&2; exit 1; }
	cp -r /usr/include/$d "$prefix/include/"
done
ucxver=$(pkg-config --with-path=/usr/lib/x86_64-linux-gnu/pkgconfig --modversion ucx 2>/dev/null || echo 1.13)
printf 'prefix=%s\nincludedir=${prefix}/include\nName: ucx\nDescription: UCX headers (loaded at run time)\nVersion: %s\nCflags: -I${includedir}\nLibs:\n' \
	"$prefix" "$ucxver" >"$prefix/lib/pkgconfig/ucx.pc"

rm -rf "$out/src"
touch "$out/.done"
echo "$out/prefix"
