#!/usr/bin/env bash
# The benchmark rows of the engine redesign (issue 9), on one GPU, in one call:
#  1. no regression: the grid of docs/benchmarks.md (n = 10k / 50k, d = 3 / 64 / 512, both
#     schedules, tf32; bf16 at d = 3 / 64), the old binary and the new one interleaved, ROUNDS
#     rounds (each row: old, new, old, new, ...);
#  2. the policy rows, new binary: P V with 64 columns against one plain LSE pass (and against the
#     CUDA-core value pass, --kernel exact), the label-augmented cost (10 classes, rows sorted by
#     class) and a block list holding 10% of the tiles, against the dense plain pass.
# Usage: scripts/bench/redesign.sh OLD_KANTOR NEW_KANTOR   (JSON lines under $OUT)
set -u
old="$1"
new="$2"
out="${OUT:-/tmp/kantor-redesign}"
rounds="${ROUNDS:-3}"
mkdir -p "$out"
common=(--backend cuda --epsilon 0.1 --iterations 10 --repeats 10 --json)
grid=()
for n in 10000 50000; do
  for d in 3 64 512; do
    for s in alternating symmetric; do grid+=("$n $d $s tf32"); done
  done
  for d in 3 64; do
    for s in alternating symmetric; do grid+=("$n $d $s bf16"); done
  done
done
: >"$out/grid.jsonl"
for r in $(seq "$rounds"); do
  for row in "${grid[@]}"; do
    read -r n d s p <<<"$row"
    for which in old new; do
      bin="$old"
      [ "$which" = new ] && bin="$new"
      line=$("$bin" bench sinkhorn --n "$n" --d "$d" --schedule "$s" --precision "$p" "${common[@]}" 2>&1 | tail -1)
      echo "{\"round\": $r, \"binary\": \"$which\", \"result\": $line}" >>"$out/grid.jsonl"
    done
  done
  echo "round $r done: $(wc -l <"$out/grid.jsonl") lines"
done
: >"$out/policies.jsonl"
for r in $(seq "$rounds"); do
  for d in 3 64; do
    for args in "" "--values 64" "--values 64 --kernel exact" "--values 128" "--classes 10" \
                "--classes 100" "--block-fraction 0.1" "--classes 10 --block-fraction 0.1"; do
      # shellcheck disable=SC2086
      line=$("$new" bench sinkhorn --n 50000 --d "$d" --precision tf32 $args "${common[@]}" 2>&1 | tail -1)
      echo "{\"round\": $r, \"args\": \"$args\", \"result\": $line}" >>"$out/policies.jsonl"
    done
  done
done
echo "policies: $(wc -l <"$out/policies.jsonl") lines"
