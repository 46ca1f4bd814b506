#!/usr/bin/env bash
# GPU run of the derivative work (issue 10) on the lent H200, from prebuilt binaries in BIN_DIR
# (build as scripts/gpu-check.sh says; copy kantor and kantor_test_{cuda,oracles,derivatives,
# newton} there). Writes logs and JSON lines under $OUT:
#   tests.log        the CUDA suites of the new code (VectorOps, P^T U conformance, derivatives)
#   sanitizer.log    compute-sanitizer memcheck and racecheck of the vector kernels and of the
#                    derivative tests that reach the GPU
#   bench.jsonl      kantor bench sinkhorn rows: forward vs forward + gradient (d = 64, tf32,
#                    10k and 50k, both schedules), one HVP (10k, d = 3, fp32, CG tol 1e-6), one
#                    HVP at 100k, d = 64 (tf32)
# Usage: scripts/gpu-derivatives.sh [BIN_DIR]
set -u
bin="${1:-.device}"
out="${OUT:-/tmp/kantor-gpu-derivatives}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
run_tests() {  # NAME FILTER TIMEOUT
  local t="$1" f="$2" lim="$3" start rc
  [ -x "$bin/$t" ] || { echo "$t: missing"; return; }
  start=$(date +%s)
  timeout "$lim" "$bin/$t" --gtest_filter="$f" --gtest_brief=1 >"$out/$t.txt" 2>&1
  rc=$?
  echo "$t '$f' rc=$rc $(( $(date +%s) - start ))s: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/$t.txt" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/$t.txt" | head -20
}
csan=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
sanitize() {  # TOOL BINARY FILTER
  timeout "${KANTOR_SANITIZER_TIMEOUT:-90}" "$csan" --tool "$1" "$bin/$2" --gtest_filter="$3" \
    --gtest_brief=1 >"$out/san_$1_$2.txt" 2>&1
  echo "$1 $2 '$3' rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$out/san_$1_$2.txt" | tr '\n' ' ')"
}
k="$bin/kantor"
{
  run_tests kantor_test_oracles '*cuda*:*Cuda*' 300
  run_tests kantor_test_derivatives '*Cuda*:*EngineComparison*' 200
} 2>&1 | tee "$out/tests.log"
{
  for n in 10000 50000; do
    for sched in alternating symmetric; do
      "$k" bench sinkhorn --n $n --d 64 --precision tf32 --iterations 10 --schedule $sched --repeats 20 --json
      "$k" bench sinkhorn --n $n --d 64 --precision tf32 --iterations 10 --schedule $sched --repeats 20 --gradient --json
    done
  done
  "$k" bench sinkhorn --n 10000 --d 3 --precision fp32 --hvp --cg-tolerance 1e-6 --repeats 10 --json
  "$k" bench sinkhorn --n 10000 --d 3 --precision fp32 --hvp --cg-tolerance 1e-6 --repeats 10 --cg-plain --json
  "$k" bench sinkhorn --n 10000 --d 3 --precision tf32 --hvp --cg-tolerance 1e-6 --repeats 10 --json
} 2>&1 | tee "$out/bench.jsonl"
{
  sanitize memcheck kantor_test_oracles 'Engines/VectorOpsTest.*cuda*'
  sanitize racecheck kantor_test_oracles 'Engines/VectorOpsTest.*cuda*'
  sanitize memcheck kantor_test_derivatives '*Cuda*'
  sanitize memcheck kantor_test_oracles '*cuda_tf32*dense*:*cuda_fp32_sq_dense*'
  sanitize racecheck kantor_test_oracles '*cuda_fp32_sq_dense_300x257x3*'
} 2>&1 | tee "$out/sanitizer.log"
run_tests kantor_test_cuda '*' 240 2>&1 | tee -a "$out/tests.log"
# One HVP at 100k points (d = 16, then 64): it completes, time reported (last: the longest).
{
  for spec in 16:100 64:200; do
    d=${spec%%:*} lim=${spec#*:}
    t0=$(date +%s)
    timeout "$lim" "$k" bench sinkhorn --n 100000 --d $d --precision tf32 --hvp \
      --cg-tolerance 1e-6 --converge-tolerance 1e-4 --converge-max-iterations 500 --repeats 1 \
      --warmup 0 --json 2>"$out/hvp100k_d$d.err"
    echo "100k d=$d rc=$? $(( $(date +%s) - t0 ))s $(tail -c 300 "$out/hvp100k_d$d.err" | tr '\n' ' ')"
  done
} 2>&1 | tee -a "$out/bench.jsonl"
