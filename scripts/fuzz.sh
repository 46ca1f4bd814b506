#!/usr/bin/env bash
# Builds the libFuzzer harnesses of the file readers (tests/fuzz/) with clang++ in
# ${KANTOR_FUZZ_BUILD_DIR:-build-fuzz}, replays the committed corpus and findings (ctest), then
# fuzzes each harness for SECONDS (default 60), up to ${KANTOR_FUZZ_JOBS:-nproc} at a time.
# Exits non-zero on any finding: the crashing input is left under build-fuzz/artifacts/<fuzzer>/
# (see docs/testing.md for turning it into a committed reproducer).
#
# Usage: scripts/fuzz.sh [SECONDS] [FUZZER...]       e.g. scripts/fuzz.sh 3600 fuzz_read_matrix_npy
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KANTOR_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"
shift || true
cxx="${KANTOR_FUZZ_CXX:-clang++}"
jobs="${KANTOR_FUZZ_JOBS:-$(nproc)}"
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2;; esac
if [ "${KANTOR_SKIP_DEPS:-0}" != 1 ]; then
  "$root/scripts/install-deps.sh"
fi
command -v "$cxx" >/dev/null 2>&1 || { echo "fuzz.sh: $cxx not found (scripts/install-deps.sh installs clang)" >&2; exit 1; }

mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DKANTOR_WITH_CUDA=OFF -DKANTOR_MARCH= -DKANTOR_FUZZ=ON \
    -DKANTOR_BUILD_TESTS=OFF -DKANTOR_BUILD_APPS=OFF >"$build/configure.log" 2>&1; then
  cat "$build/configure.log"
  exit 1
fi
cmake --build "$build" -j "$(nproc)" --target kantor_fuzzers

all=(fuzz_read_matrix_npy fuzz_read_matrix_csv fuzz_read_vector_npy fuzz_read_vector_csv
     fuzz_read_matrix_idx fuzz_read_labels)
fuzzers=("$@")
[ ${#fuzzers[@]} -eq 0 ] && fuzzers=("${all[@]}")

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# 1. Replay: every committed seed and reproducer once (fails fast on a known, unfixed finding).
(cd "$build" && ctest --output-on-failure -L fuzz) || { echo "fuzz.sh: replay of the corpus/findings failed" >&2; exit 1; }
[ "$seconds" -eq 0 ] && exit 0

# 2. Fuzz. New interesting inputs go to build-fuzz/corpus/<fuzzer>/ (not the committed seeds).
mkdir -p "$build/logs"
run_one() {  # the dictionary is tests/fuzz/<last word of the name>.dict: npy, csv, idx, labels
  local f="$1" fmt="${1##*_}"
  mkdir -p "$build/corpus/$f" "$build/artifacts/$f"
  "$build/tests/fuzz/$f" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -dict="$root/tests/fuzz/$fmt.dict" \
    -artifact_prefix="$build/artifacts/$f/" "$build/corpus/$f" "$root/tests/fuzz/corpus/$f" \
    >"$build/logs/$f.log" 2>&1
}
declare -A pid_of=()
for f in "${fuzzers[@]}"; do
  [ -x "$build/tests/fuzz/$f" ] || { echo "fuzz.sh: unknown fuzzer '$f' (have: ${all[*]})" >&2; exit 2; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "fuzz.sh: $f for ${seconds}s (log: $build/logs/$f.log)"
  run_one "$f" &
  pid_of[$f]=$!
done
failed=()
for f in "${fuzzers[@]}"; do
  rc=0
  wait "${pid_of[$f]}" || rc=$?
  execs=$(grep -Eo "stat::number_of_executed_units: *[0-9]+" "$build/logs/$f.log" | grep -Eo "[0-9]+$" || echo "?")
  cov=$(grep -Eo "cov: [0-9]+" "$build/logs/$f.log" | tail -1 || true)
  if [ "$rc" -ne 0 ]; then
    failed+=("$f")
    echo "fuzz.sh: FINDING in $f (rc=$rc, $execs runs); last lines of $build/logs/$f.log:"
    tail -40 "$build/logs/$f.log"
    ls -1 "$build/artifacts/$f/" 2>/dev/null | sed "s|^|  artifact: $build/artifacts/$f/|"
  else
    echo "fuzz.sh: $f ok ($execs runs, ${cov:-cov: ?})"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]} (reproduce: build-fuzz/tests/fuzz/<fuzzer> <artifact>)" >&2
  exit 1
fi
