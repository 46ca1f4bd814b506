#!/usr/bin/env bash
# Set up on a fresh machine and run the main job: `kantor solve --demo` (CUDA when a GPU is
# visible, CPU otherwise). Extra arguments go to `kantor solve`, e.g. scripts/demo.sh --json
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/configure.sh" kantor_cli
exec "${KANTOR_BUILD_DIR:-$root/build}/apps/kantor" solve --demo "$@"
