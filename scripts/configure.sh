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
# The Python package (KANTOR_PYTHON=AUTO: built when scripts/python-deps.sh finds an interpreter
# with numpy and headers and can provide nanobind; ON: required; OFF: not built).
py_args=(-DKANTOR_PYTHON=OFF)
if [ "${KANTOR_PYTHON:-AUTO}" != OFF ]; then
  if py="$("$root/scripts/python-deps.sh" "$build/pydeps")"; then
    py_args=(-DKANTOR_PYTHON=ON "-DPython_EXECUTABLE=$py")
    export PYTHONPATH="$build/pydeps${PYTHONPATH:+:$PYTHONPATH}"
  elif [ "${KANTOR_PYTHON:-AUTO}" = ON ]; then
    exit 1
  fi
fi
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKANTOR_WITH_CUDA="${KANTOR_WITH_CUDA:-AUTO}" -DKANTOR_MARCH="${KANTOR_MARCH:-native}" \
    "${py_args[@]}" >"$build/configure.log" 2>&1; then
  cat "$build/configure.log"
  exit 1
fi
cmake --build "$build" -j "$(nproc)" ${1:+--target "$@"}
