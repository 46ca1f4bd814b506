#!/usr/bin/env bash
# Set up on a fresh machine, build everything (CUDA engine too when nvcc is present) and run the
# whole test suite with ctest. GPU suites (Cuda*) skip cleanly where no GPU is visible.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KANTOR_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/configure.sh"
cd "$build"
exec ctest --output-on-failure -j "$(nproc)" --timeout 1200
