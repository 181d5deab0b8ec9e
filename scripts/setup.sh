#!/usr/bin/env bash
# Installs every Debian package kiln's build needs, then configures and builds the release preset.
# Usage: scripts/setup.sh [preset ...]   (default: release)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev libsqlite3-dev libgtest-dev libgmock-dev
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

# The CUDA backend's attention uses the cuDNN frontend, a header-only C++ library NVIDIA publishes on PyPI
# (nvidia-cudnn-frontend); its headers are unpacked under build/deps, where CMake looks for them. Only where the
# CUDA toolkit is installed; without them the CUDA backend builds without cuDNN attention.
CUDNN_FRONTEND_VERSION=1.32.0
frontend_dir="build/deps/cudnn-frontend-$CUDNN_FRONTEND_VERSION"
if [ -x /usr/local/cuda/bin/nvcc ] && [ ! -f "$frontend_dir/include/cudnn_frontend.h" ]; then
  echo "setup: fetching cudnn-frontend $CUDNN_FRONTEND_VERSION headers from PyPI"
  tmp="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"; then
    mkdir -p "$frontend_dir"
    python3 - "$tmp" "$frontend_dir" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
  else
    echo "setup: could not fetch cudnn-frontend; the CUDA backend builds without cuDNN attention" >&2
  fi
  rm -rf "$tmp"
fi

presets=("$@")
if ((${#presets[@]} == 0)); then presets=(release); fi
for preset in "${presets[@]}"; do
  echo "setup: building preset '$preset'"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
done
