#!/usr/bin/env bash
# The OTDD runs of docs/otdd.md and docs/benchmarks.md on Fashion-MNIST (Debian's
# dataset-fashion-mnist: /usr/share/datasets/fashion-mnist), end to end through `kantor otdd`,
# plus the OTDD test binary (its Cuda* cases run on a GPU). Each run writes its JSON (and the
# heatmaps) to OUT.
#
# Usage: scripts/gpu-otdd.sh BIN_DIR [DATA_DIR] [OUT_DIR] [RUNS...]
#   BIN_DIR   folder holding `kantor` and (optionally) `kantor_test_otdd`
#   RUNS      any of: tests compat converged halves relabel shift noise exact cpu (default: all
#             but converged, exact and cpu)
# Environment: KANTOR_OTDD_BACKEND (default auto), KANTOR_OTDD_CONVERGED_ITERS (default 20000),
#              KANTOR_OTDD_MAX_SAMPLES (default 0 = all), KANTOR_OTDD_EXACT_SAMPLES (default 1000).
set -uo pipefail
bin="${1:?usage: scripts/gpu-otdd.sh BIN_DIR [DATA_DIR] [OUT_DIR] [RUNS...]}"
data="${2:-/usr/share/datasets/fashion-mnist}"
out="${3:-otdd-out}"
shift $(( $# < 3 ? $# : 3 ))
runs=("$@")
[ ${#runs[@]} -eq 0 ] && runs=(tests compat halves relabel shift noise)
mkdir -p "$out"
backend="${KANTOR_OTDD_BACKEND:-auto}"
samples="${KANTOR_OTDD_MAX_SAMPLES:-0}"
train=(--source "$data/train-images-idx3-ubyte.gz" --source-labels "$data/train-labels-idx1-ubyte.gz")
test_=(--target "$data/t10k-images-idx3-ubyte.gz" --target-labels "$data/t10k-labels-idx1-ubyte.gz")
train_t=(--target "$data/train-images-idx3-ubyte.gz" --target-labels "$data/train-labels-idx1-ubyte.gz")
common=(--backend "$backend" --max-samples "$samples" --json --quiet)
status=0
one() {  # name, args...
  local name="$1"
  shift
  echo "== otdd $name: kantor otdd $*" >&2
  local t0
  t0=$(date +%s.%N)
  if "$bin/kantor" otdd "$@" >"$out/$name.json" 2>"$out/$name.err"; then
    echo "   $(python3 -c "import json,sys; j=json.load(open('$out/$name.json')); print({k: j.get(k) for k in ['distance','distance_compatible','distance_converged','compatible_marginal_error','converged','converged_iterations','seconds_read','seconds_labels','seconds']})" 2>/dev/null || head -c 400 "$out/$name.json")" >&2
  else
    echo "   FAILED: $(cat "$out/$name.err")" >&2
    status=1
  fi
  echo "   wall $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s" >&2
}
for r in "${runs[@]}"; do
  case "$r" in
    tests)
      if [ -x "$bin/kantor_test_otdd" ]; then
        "$bin/kantor_test_otdd" --gtest_brief=1 2>&1 | tail -5 || status=1
      fi
      ;;
    compat)
      one warmup "${train[@]}" "${test_[@]}" "${common[@]}"
      one compat "${train[@]}" "${test_[@]}" "${common[@]}" --output-heatmap "$out/heatmap-train-test.svg"
      ;;
    converged)
      one converged "${train[@]}" "${test_[@]}" "${common[@]}" --mode converged \
        --max-iterations "${KANTOR_OTDD_CONVERGED_ITERS:-20000}"
      ;;
    halves)
      one halves "${train[@]}" "${test_[@]}" "${common[@]}" --source-classes 0,1,2,3,4 \
        --target-classes 5,6,7,8,9 --output-heatmap "$out/heatmap-halves.svg"
      ;;
    relabel)
      one relabel "${train[@]}" "${train_t[@]}" "${common[@]}" --target-relabel 3,7,0,9,1,5,8,2,6,4
      ;;
    shift)
      one shift "${train[@]}" "${test_[@]}" "${common[@]}" --target-shift 2
      ;;
    noise)
      one noise "${train[@]}" "${test_[@]}" "${common[@]}" --target-noise 1.0
      ;;
    exact)
      one exact "${train[@]}" "${test_[@]}" "${common[@]}" --label-distance exact \
        --max-class-samples "${KANTOR_OTDD_EXACT_SAMPLES:-1000}" --output-heatmap "$out/heatmap-exact.svg"
      ;;
    cpu)
      one cpu-2000 "${train[@]}" "${test_[@]}" --backend cpu --max-samples 2000 --json --quiet --mode both
      ;;
    *) echo "gpu-otdd.sh: unknown run '$r'" >&2; status=2 ;;
  esac
done
exit $status
