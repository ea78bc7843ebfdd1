#!/bin/bash
# Installs the Debian 12 packages Quilt builds, tests and runs with.
# Idempotent: installs only what is missing; uses sudo when not root.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap g++ python3 git clang-format
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libucx-dev libsqlite3-dev libopenblas-dev libsystemd-dev systemd
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libssl-dev
  coinor-libclp-dev libjemalloc-dev libonnx-dev python3-onnx python3-numpy procps
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get -o DPkg::Lock::Timeout=1200 update -qq
$sudo apt-get -o DPkg::Lock::Timeout=1200 install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
