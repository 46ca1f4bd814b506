#!/usr/bin/env bash
# Installs the Debian packages kantor needs to build and test, when they are missing.
# Needs root (or sudo). The CUDA toolkit is optional and not installed here: with nvcc on the PATH
# (or in /usr/local/cuda/bin) the CUDA engine is built too.
set -euo pipefail
packages=(cmake ninja-build g++ make libeigen3-dev libboost-program-options-dev libgtest-dev
          liblemon-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "kantor: installing missing packages: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
