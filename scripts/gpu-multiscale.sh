#!/usr/bin/env bash
# The multiscale GPU checks and timings of docs/multiscale.md and docs/benchmarks.md: the CUDA
# multiscale tests (the points-stage kernels against the CPU engine and the host's stage among
# them) and compute-sanitizer memcheck (both kernels) and racecheck (the descent's points stage),
# then `kantor bench solve` on the issue's data at 2^17 and 2^20 points a side, for each binary
# folder given, interleaved in rounds (compare only within one call), with the screen's points
# stage off, on (the host's lists) and engine (inside the device descent) for the new binary; one
# JSON line per solve on stdout (and in OUT/multiscale.jsonl). Last, one run per size of the
# default and of `engine` with --phases (OUT/phases-*.json: where the time goes, each phase
# synchronized; not for the timing comparison).
#
# Usage: scripts/gpu-multiscale.sh OUT_DIR BIN_DIR [OLD_BIN_DIR]
#   BIN_DIR      folder holding `kantor`, `kantor_test_sinkhorn` and `kantor_test_cuda` (this
#                tree's build)
#   OLD_BIN_DIR  optional folder holding an older `kantor` (the baseline, run with its defaults)
# Environment: KANTOR_MS_SIZES (default "131072 1048576"), KANTOR_MS_ROUNDS (default 2),
#              KANTOR_MS_REPEATS (default 3).
set -uo pipefail
out="${1:?usage: scripts/gpu-multiscale.sh OUT_DIR BIN_DIR [OLD_BIN_DIR]}"
bin="${2:?usage: scripts/gpu-multiscale.sh OUT_DIR BIN_DIR [OLD_BIN_DIR]}"
old="${3:-}"
sizes="${KANTOR_MS_SIZES:-131072 1048576}"
rounds="${KANTOR_MS_ROUNDS:-2}"
repeats="${KANTOR_MS_REPEATS:-3}"
mkdir -p "$out"
status=0
if [ -x "$bin/kantor_test_sinkhorn" ]; then
  "$bin/kantor_test_sinkhorn" --gtest_brief=1 --gtest_filter='CudaMultiscale.*:MultiscaleOracle.*' \
    2>&1 | tail -8 || status=1
  if command -v compute-sanitizer > /dev/null; then
    compute-sanitizer --tool memcheck "$bin/kantor_test_sinkhorn" \
      --gtest_filter='CudaMultiscale.AtomPairMaxima*:CudaMultiscale.TheEnginePointsStage*' \
      2>&1 | tail -3 || status=1
    compute-sanitizer --tool racecheck --racecheck-report all "$bin/kantor_test_sinkhorn" \
      --gtest_filter='CudaMultiscale.TheEnginePointsStage*' 2>&1 | tail -3 || status=1
    compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/kantor_test_sinkhorn" \
      --gtest_filter='CudaMultiscale.TheEnginesLists*' 2>&1 | tail -3 || status=1
  fi
fi
# The lists built on the device (lib/cuda/screen_lists.cu) against a brute force, and under the
# sanitizers.
if [ -x "$bin/kantor_test_cuda" ]; then
  "$bin/kantor_test_cuda" --gtest_brief=1 --gtest_filter='CudaScreenLists.*' 2>&1 | tail -4 ||
    status=1
  if command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 1 "$bin/kantor_test_cuda" \
        --gtest_filter='CudaScreenLists.*' 2>&1 | tail -3 || status=1
    done
  fi
fi
solve() {  # tag, binary, n, extra args...
  local tag="$1" kantor="$2" n="$3"
  shift 3
  local line
  line=$("$kantor" bench solve --backend cuda --n "$n" --repeats "$repeats" --json "$@" 2>&1 | tail -1)
  python3 - "$tag" "$line" <<'PY' | tee -a "$out/multiscale.jsonl" || status=1
import json, sys
tag, line = sys.argv[1], sys.argv[2]
try:
    j = json.loads(line)
except ValueError:
    print(json.dumps({"tag": tag, "error": line}))
    sys.exit(1)
j["tag"] = tag
print(json.dumps(j))
PY
}
for r in $(seq 1 "$rounds"); do
  for n in $sizes; do
    [ -n "$old" ] && solve "old" "$old/kantor" "$n"
    solve "new, points stage off" "$bin/kantor" "$n" --points-stage off
    solve "new, points stage on" "$bin/kantor" "$n" --points-stage on
    solve "new, points stage engine" "$bin/kantor" "$n" --points-stage engine
  done
done
for n in $sizes; do
  for ps in auto engine; do
    "$bin/kantor" bench solve --backend cuda --n "$n" --repeats 2 --phases --points-stage "$ps" \
      --json > "$out/phases-$ps-$n.json" 2>&1 || status=1
  done
done
exit $status
