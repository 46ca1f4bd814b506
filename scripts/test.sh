#!/usr/bin/env bash
# Set up on a fresh machine, then run every test stage (what CI runs; docs/testing.md):
#   1. normal build (CUDA engine too when nvcc is present) + the whole ctest suite in build/;
#      GPU suites (Cuda*) skip cleanly where no GPU is visible;
#   2. scripts/sanitize.sh: ASan + UBSan build of the CPU library, CLI and tests + ctest
#      (build-asan/);
#   3. scripts/fuzz.sh: the file-reader fuzzers, ${KANTOR_FUZZ_SECONDS:-40} s each (build-fuzz/).
# Every stage runs even when an earlier one fails; the exit status is non-zero if any failed.
#   KANTOR_TEST_SANITIZE=0 / KANTOR_FUZZ_SECONDS=0 skip stage 2 / the fuzzing of stage 3.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KANTOR_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
export KANTOR_SKIP_DEPS=1

summary=()
status=0
stage() {  # stage NAME COMMAND...
  local name="$1" start rc=0
  shift
  echo "==== test.sh: $name"
  start=$(date +%s)
  "$@" || rc=$?
  summary+=("$(printf '%-28s %s  %4ds' "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (rc=$rc)")" $(( $(date +%s) - start )))")
  [ $rc -eq 0 ] || status=1
}
normal() {  # (called from `stage ... || rc=$?`, where set -e is off: chain with &&)
  "$root/scripts/configure.sh" &&
    (cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 1200)
}

total_start=$(date +%s)
stage "build + ctest" normal
if [ "${KANTOR_TEST_SANITIZE:-1}" != 0 ]; then
  stage "sanitize (asan+ubsan)" "$root/scripts/sanitize.sh"
fi
stage "fuzz (${KANTOR_FUZZ_SECONDS:-40}s each)" "$root/scripts/fuzz.sh" "${KANTOR_FUZZ_SECONDS:-40}"

echo "==== test.sh summary ($(( $(date +%s) - total_start ))s in all)"
printf '%s\n' "${summary[@]}"
exit $status
