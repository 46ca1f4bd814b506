#!/usr/bin/env bash
# Configures and builds kantor in ${KANTOR_BUILD_DIR:-build} (CUDA engine when nvcc is found).
# Usage: scripts/configure.sh [ninja targets...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KANTOR_BUILD_DIR:-$root/build}"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKANTOR_WITH_CUDA="${KANTOR_WITH_CUDA:-AUTO}" -DKANTOR_MARCH="${KANTOR_MARCH:-native}" \
    >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" ${1:+--target "$@"}
