#!/usr/bin/env bash
# GPU verification run (for the lent H200 machine): runs every test binary and a benchmark grid
# from prebuilt binaries, writing logs and JSON under $OUT. Build the binaries elsewhere with
#   cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
#         -DBoost_USE_STATIC_LIBS=ON -DKANTOR_MARCH=x86-64-v3
# and copy kantor + kantor_test_* into one folder.   Usage: scripts/gpu-check.sh [BIN_DIR]
# After the plain test run, kantor_test_cuda runs again under compute-sanitizer (memcheck, then
# racecheck) on its small-size tests; the summary prints their error / hazard counts.
#   KANTOR_MEMCHECK_FILTER   gtest filter for memcheck  (default: Cuda*:-CudaLarge.*)
#   KANTOR_RACECHECK_FILTER  gtest filter for racecheck (default: the three small CudaSinkhorn
#                            solves that reach the fp32 SIMT, tf32 and bf16 mma kernels; racecheck
#                            is ~100x slower: CudaOracle.PassesFp64 alone takes 2 minutes)
#   KANTOR_SANITIZER_TIMEOUT seconds per tool (default 300); KANTOR_GPU_SANITIZE=0 skips both.
set -u
bin="${1:-.device-final}"
out="${OUT:-/tmp/kantor-gpu-check}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
"$bin/kantor" info
summary=""
for t in kantor_test_core kantor_test_sinkhorn kantor_test_oracles kantor_test_birkhoff kantor_test_cuda; do
  [ -x "$bin/$t" ] || continue
  start=$(date +%s)
  "$bin/$t" >"$out/$t.log" 2>&1
  rc=$?
  line=$(grep -E "^\[  (PASSED|FAILED)  \]|tests? from .* ran" "$out/$t.log" | tr '\n' ' ')
  summary+="$t rc=$rc $(( $(date +%s) - start ))s: $line"$'\n'
  grep -E "^\[  FAILED  \]" "$out/$t.log" | head -20
done
# ---- compute-sanitizer over the Cuda suite (CudaLarge.* is n = 100,000: too slow under it)
sanitizer_summary=""
csan=""
if command -v compute-sanitizer >/dev/null 2>&1; then
  csan="$(command -v compute-sanitizer)"
elif [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  csan=/usr/local/cuda/bin/compute-sanitizer
fi
if [ "${KANTOR_GPU_SANITIZE:-1}" = 0 ]; then
  sanitizer_summary="compute-sanitizer: skipped (KANTOR_GPU_SANITIZE=0)"$'\n'
elif [ -z "$csan" ]; then
  sanitizer_summary="compute-sanitizer: NOT RUN: not found on the PATH or in /usr/local/cuda/bin (it ships with the CUDA toolkit)"$'\n'
elif [ ! -x "$bin/kantor_test_cuda" ]; then
  sanitizer_summary="compute-sanitizer: NOT RUN: $bin/kantor_test_cuda is missing"$'\n'
else
  # The policy kernels (label pair term, block lists: kantor_test_oracles' CUDA conformance cases)
  # and the tensor-core value pass (CudaValuesMma) run under both tools too.
  policy_filter="${KANTOR_POLICY_FILTER:-*cuda_tf32_lab100_blocks30_300x257x3:*cuda_bf16_lab1_emptyrows_300x257x3:*cuda_tf32_lab1_dense_130x200x17:*cuda_fp32_lab100_onetile_300x257x3}"
  for tool in memcheck racecheck memcheck-policies racecheck-policies; do
    binary="$bin/kantor_test_cuda"
    case "$tool" in
      memcheck)
        filter="${KANTOR_MEMCHECK_FILTER:-Cuda*:-CudaLarge.*}"
        extra=(--leak-check full) ;;
      racecheck)
        filter="${KANTOR_RACECHECK_FILTER:-CudaCertificate.KernelMatchesTheCpuEngineOnOddSizes:CudaCertificate.Fp32PathSmallCases:CudaSinkhorn.DeviceResidentProblemMatchesHost:CudaSinkhorn.Bf16AccuracyAgainstUnroundedFp64:CudaSinkhorn.Tf32AccuracyAgainstUnroundedFp64:CudaValuesMma.*}"
        extra=(--racecheck-report all) ;;
      memcheck-policies)
        binary="$bin/kantor_test_oracles"; filter="$policy_filter"; extra=(--leak-check full) ;;
      racecheck-policies)
        binary="$bin/kantor_test_oracles"; filter="$policy_filter"; extra=(--racecheck-report all) ;;
    esac
    [ -x "$binary" ] || continue
    log="$out/compute-sanitizer-$tool.log"
    start=$(date +%s)
    timeout "${KANTOR_SANITIZER_TIMEOUT:-300}" "$csan" --tool "${tool%-policies}" "${extra[@]}" \
      --error-exitcode 86 "$binary" --gtest_filter="$filter" >"$log" 2>&1
    rc=$?
    # memcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: H hazards displayed
    # (N errors, W warnings)".
    errors=$(grep -Eo "ERROR SUMMARY: [0-9]+|\([0-9]+ errors?" "$log" | tail -1 | grep -Eo "[0-9]+")
    hazards=$(grep -Eo "RACECHECK SUMMARY: [0-9]+ hazards?" "$log" | tail -1 | grep -Eo "[0-9]+")
    tests=$(grep -E "^\[  (PASSED|FAILED)  \]" "$log" | tr '\n' ' ')
    note=""
    [ "$rc" -eq 124 ] && note=" TIMED OUT after ${KANTOR_SANITIZER_TIMEOUT:-300}s"
    [ "$rc" -eq 86 ] && note=" (errors reported)"
    line="compute-sanitizer $tool rc=$rc$note $(( $(date +%s) - start ))s: errors=${errors:-?}"
    [ "${tool%-policies}" = racecheck ] && line+=" hazards=${hazards:-?}"
    sanitizer_summary+="$line filter=$filter $tests"$'\n'
    grep -E "^========= (Invalid|Program hit|Error|Race|Warning|ERROR SUMMARY|RACECHECK)" "$log" \
      | sort | uniq -c | sort -rn | head -10
  done
fi
printf "%s" "$sanitizer_summary"

"$bin/kantor" solve --demo --backend cuda --json >"$out/demo_cuda.json" 2>&1
echo "demo (cuda): $(head -c 400 "$out/demo_cuda.json")"
{
  for m in newton sinkhorn; do
    "$bin/kantor" bench birkhoff --batch 16777216 --n 4 --method "$m" --backward --runs 20 --json
    echo
  done
  for scale in 1 10; do
    "$bin/kantor" bench birkhoff --batch 1048576 --n 4 --method newton --scale "$scale" \
      --accuracy 1048576 --runs 20 --no-graphs --json
    echo
  done
  for s in alternating symmetric; do
    for d in 3 64; do
      "$bin/kantor" bench sinkhorn --backend cuda --n 50000 --d "$d" --epsilon 0.1 \
        --iterations 10 --schedule "$s" --precision tf32 --repeats 10 --json
      echo
    done
  done
} >"$out/bench.jsonl" 2>&1
python3 - "$out/bench.jsonl" <<'PY' || cat "$out/bench.jsonl"
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    j = json.loads(line)
    keep = {k: v for k, v in j.items() if any(s in k for s in (
        "benchmark", "method", "batch", "n", "d", "schedule", "precision", "ms", "fraction",
        "scale", "err", "accuracy"))}
    print(json.dumps(keep))
PY
echo "---- tests"
printf "%s" "$summary"
echo "---- compute-sanitizer"
printf "%s" "$sanitizer_summary"
