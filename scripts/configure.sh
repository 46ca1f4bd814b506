#!/usr/bin/env bash
# Configures and builds kantor in ${KANTOR_BUILD_DIR:-build} (CUDA engine when nvcc is found).
# Configuration runs every time (cheap when nothing changed), so a build directory made before
# nvcc was installed, or with other KANTOR_* settings, is brought up to date.
# Usage: scripts/configure.sh [targets...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KANTOR_BUILD_DIR:-$root/build}"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKANTOR_WITH_CUDA="${KANTOR_WITH_CUDA:-AUTO}" -DKANTOR_MARCH="${KANTOR_MARCH:-native}" \
    >"$build/configure.log" 2>&1; then
  cat "$build/configure.log"
  exit 1
fi
cmake --build "$build" -j "$(nproc)" ${1:+--target "$@"}
