#!/usr/bin/env bash
# GPU verification run (for the lent H200 machine): runs every test binary and a benchmark grid
# from prebuilt binaries, writing logs and JSON under $OUT. Build the binaries elsewhere with
#   cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
#         -DBoost_USE_STATIC_LIBS=ON -DKANTOR_MARCH=x86-64-v3
# and copy kantor + kantor_test_* into one folder.   Usage: scripts/gpu-check.sh [BIN_DIR]
set -u
bin="${1:-.device-final}"
out="${OUT:-/tmp/kantor-gpu-check}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
"$bin/kantor" info
summary=""
for t in kantor_test_core kantor_test_sinkhorn kantor_test_birkhoff kantor_test_cuda; do
  [ -x "$bin/$t" ] || continue
  start=$(date +%s)
  "$bin/$t" >"$out/$t.log" 2>&1
  rc=$?
  line=$(grep -E "^\[  (PASSED|FAILED)  \]|tests? from .* ran" "$out/$t.log" | tr '\n' ' ')
  summary+="$t rc=$rc $(( $(date +%s) - start ))s: $line"$'\n'
  grep -E "^\[  FAILED  \]" "$out/$t.log" | head -20
done
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
