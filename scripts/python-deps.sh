#!/usr/bin/env bash
# Prepares the Python side of the build: picks the interpreter (the Debian /usr/bin/python3
# first: its numpy, pytest and POT come from apt, scripts/install-deps.sh), checks that it has
# numpy and its development headers, and makes nanobind importable, installing it from PyPI with
# `pip install --target DIR` when it is missing (no virtual environment, no system change).
# Usage: scripts/python-deps.sh DIR   Prints the interpreter's path; exit 1 when not possible.
set -euo pipefail
dir="$1"
py=""
for c in /usr/bin/python3 "$(command -v python3 || true)"; do
  [ -n "$c" ] && [ -x "$c" ] || continue
  if "$c" -c "import numpy, sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 1)" 2>/dev/null; then
    py="$c"
    break
  fi
done
if [ -z "$py" ]; then
  echo "kantor: no python3 with numpy and its headers (python3-dev): the Python package is not built" >&2
  exit 1
fi
if ! PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" "$py" -c "import nanobind" 2>/dev/null; then
  mkdir -p "$dir"
  if ! "$py" -m pip install -q --disable-pip-version-check --target "$dir" "nanobind>=2.0" >&2; then
    echo "kantor: could not install nanobind (pip install --target $dir): the Python package is not built" >&2
    exit 1
  fi
fi
echo "$py"
