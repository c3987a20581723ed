#!/usr/bin/env bash
# Install the Debian packages the build and the tests need, when missing.
# As root: apt-get installs them. Otherwise: print the exact command, fail.
set -euo pipefail
pkgs=(cmake make ninja-build gcc pkg-config clang libclang-rt-14-dev
      libzmq3-dev libmicrohttpd-dev libcurl4-openssl-dev libjson-c-dev libcmocka-dev
      libucx-dev ucx-utils
      python3 python3-dev python3-pytest python3-numpy python3-zmq python3-pip python3-torch
      curl iproute2 valgrind librsvg2-bin gcovr)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "layercake: missing Debian packages; run as root:" >&2
  echo "  apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "layercake: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >&2
