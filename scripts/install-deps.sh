#!/usr/bin/env bash
# Installs the Debian packages kantor needs to build and test, when they are missing.
# Needs root (or sudo). The CUDA toolkit is optional and not installed here: with nvcc on the PATH
# (or in /usr/local/cuda/bin) the CUDA engine is built too.
# zlib1g-dev: kantor::io reads gzip-compressed files (MNIST's .gz) through zlib.
# clang + libclang-rt-dev (the compiler-rt archives: libclang_rt.fuzzer / asan / ubsan, which
# clang-14 only recommends) are for scripts/fuzz.sh; g++ brings libasan / libubsan for
# scripts/sanitize.sh. python3-dev, python3-numpy, python3-pytest, python3-pip: the Python package
# (python/, built against the Debian interpreter; scripts/python-deps.sh adds nanobind from PyPI)
# and its pytest suite.
set -euo pipefail
packages=(cmake ninja-build g++ make libeigen3-dev libboost-program-options-dev libgtest-dev
          liblemon-dev zlib1g-dev clang libclang-rt-dev python3-dev python3-numpy python3-pytest
          python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
fuzzer_runtime_missing() {
  local f
  command -v clang++ >/dev/null 2>&1 || return 0
  f="$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)"
  [ ! -f "$f" ]
}
# Optional: independent references for tests (python3-pot: POT 0.8.2, which the unbalanced-OT
# test tests/reference/pot_unbalanced.py compares against; it reports "Skipped" without it).
optional=(python3-pot)
optional_missing=()
for p in "${optional[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || optional_missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ] && [ ${#optional_missing[@]} -eq 0 ] && ! fuzzer_runtime_missing; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -ne 0 ]; then
  echo "kantor: installing missing packages: ${missing[*]}" >&2
  $sudo apt-get update -qq
  # libclang-rt-dev is Debian 12+ / Ubuntu 23.04+; older releases ship the runtime in
  # libclang-common-<v>-dev (a dependency of clang), so retry without it.
  if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    rest=()
    for p in "${missing[@]}"; do [ "$p" = libclang-rt-dev ] || rest+=("$p"); done
    $sudo apt-get install -y -qq --no-install-recommends "${rest[@]}" >/dev/null
  fi
fi
if [ ${#optional_missing[@]} -ne 0 ]; then
  echo "kantor: installing optional test references: ${optional_missing[*]}" >&2
  [ ${#missing[@]} -ne 0 ] || $sudo apt-get update -qq || true
  $sudo apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" >/dev/null ||
    echo "kantor: warning: could not install ${optional_missing[*]}; the POT reference test will be skipped" >&2
fi
if fuzzer_runtime_missing; then
  # The versioned package of the installed clang, e.g. libclang-rt-14-dev.
  v="$(clang++ -dumpversion 2>/dev/null | cut -d. -f1)"
  if [ -n "$v" ]; then
    $sudo apt-get install -y -qq --no-install-recommends "libclang-rt-$v-dev" >/dev/null 2>&1 || true
  fi
  if fuzzer_runtime_missing; then
    echo "kantor: warning: clang's libFuzzer runtime (libclang_rt.fuzzer-x86_64.a) is missing;" \
         "scripts/fuzz.sh will not build (install libclang-rt-<version>-dev)" >&2
  fi
fi
