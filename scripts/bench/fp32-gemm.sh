#!/usr/bin/env bash
# The fp32 cuBLAS families on one GPU, in one call (docs/cuda-engine.md section 7):
#  1. their conformance cases (tests/oracles, forced kernels) and the dispatch-table test;
#  2. speed: kantor bench sinkhorn, fp32, n = m = 50k, d in D_LIST, each family;
#  3. accuracy where it matters: Fashion-MNIST OTDD train vs test (full data), compatible mode
#     per family, and converged mode with a budget of CONV_ITERS cross iterations per family
#     (the float64 certificate against the engine's residual: the floor of section 7).
# Usage: scripts/bench/fp32-gemm.sh BIN_DIR DATA_DIR   (BIN_DIR: kantor, kantor_test_oracles,
#        kantor_test_cuda; DATA_DIR: the four Fashion-MNIST .gz files). Output under $OUT (at most
#        four files: summary.txt, bench.jsonl, otdd.jsonl, tests.txt).
# Environment: FAMILIES (default "exact gemm-fp32 gemm-3xtf32 gemm-fp64"), D_LIST (default
#              "16 32 64 784"), CONV_ITERS (default 150), CONV_TIMEOUT (default 150 s per run).
set -u
bin="${1:?usage: scripts/bench/fp32-gemm.sh BIN_DIR DATA_DIR}"
data="${2:?usage: scripts/bench/fp32-gemm.sh BIN_DIR DATA_DIR}"
out="${OUT:-/tmp/kantor-fp32-gemm}"
families="${FAMILIES:-exact gemm-fp32 gemm-3xtf32 gemm-fp64}"
dlist="${D_LIST:-16 32 64 784}"
mkdir -p "$out"
S="$out/summary.txt"
{
  "$bin/kantor_test_cuda" --gtest_brief=1 --gtest_filter='CudaDispatch*' 2>&1 | tail -2
  "$bin/kantor_test_oracles" --gtest_brief=1 --gtest_filter='*gemm*' 2>&1 | tail -4
} >"$out/tests.txt" 2>&1
cat "$out/tests.txt" >"$S"
for d in $dlist; do
  it=10
  [ "$d" -gt 256 ] && it=2
  for k in $families; do
    "$bin/kantor" bench sinkhorn --backend cuda --precision fp32 --n 50000 --d "$d" \
      --epsilon 0.1 --iterations "$it" --repeats 5 --kernel "$k" --json >>"$out/bench.jsonl" 2>>"$S"
  done
done
python3 - "$out/bench.jsonl" >>"$S" 2>&1 <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    print("bench d=%s %-12s %10.3f ms [%.3f, %.3f] per %d it" % (j["d"], j["kernel"], j["ms_median"], j["ms_min"], j["ms_max"], j["iterations"]))
PY
tr=(--source "$data/train-images-idx3-ubyte.gz" --source-labels "$data/train-labels-idx1-ubyte.gz")
te=(--target "$data/t10k-images-idx3-ubyte.gz" --target-labels "$data/t10k-labels-idx1-ubyte.gz")
one() {  # name, args...
  local name="$1"
  shift
  timeout "${CONV_TIMEOUT:-150}" "$bin/kantor" otdd "${tr[@]}" "${te[@]}" --json --quiet "$@" \
    >/tmp/fp32-gemm-otdd.json 2>/tmp/fp32-gemm-otdd.err
  echo "otdd $name rc=$? $*" >>"$S"
  head -c 300 /tmp/fp32-gemm-otdd.err >>"$S"
  python3 - "$name" "$out/otdd.jsonl" >>"$S" 2>&1 <<'PY'
import json, re, sys
j = json.loads(re.sub(r"\bnan\b|\binf\b", "null", open("/tmp/fp32-gemm-otdd.json").read()))
j["run"] = sys.argv[1]
open(sys.argv[2], "a").write(json.dumps(j) + "\n")
keys = ["distance", "compatible_marginal_error", "converged_marginal_error", "converged_iterations",
        "converged_iterations_xx", "seconds_read", "seconds_labels", "seconds_setup", "seconds_ot", "seconds"]
print("   ", {k: j.get(k) for k in keys})
r = j.get("converged_records") or []
if r:
    print("    last records:", r[-2:])
PY
}
one warmup
for k in $families; do one "compat_$k" --kernel "$k"; done
for k in $families; do
  one "conv${CONV_ITERS:-150}_$k" --kernel "$k" --mode converged --max-iterations "${CONV_ITERS:-150}"
done
