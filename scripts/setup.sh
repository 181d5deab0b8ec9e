#!/usr/bin/env bash
# Installs every Debian package kiln's build needs, then configures and builds the release preset.
# Usage: scripts/setup.sh [preset ...]   (default: release)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev libgtest-dev libgmock-dev
          libonnx-dev libprotobuf-dev protobuf-compiler)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

presets=("$@")
if ((${#presets[@]} == 0)); then presets=(release); fi
for preset in "${presets[@]}"; do
  echo "setup: building preset '$preset'"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
done
