#!/usr/bin/env bash
# Set up spotfleet on a fresh machine: a virtualenv in .venv with the CPU torch wheel
# first (so no CUDA packages are pulled), then the project.
#   bash scripts/bootstrap.sh          # runtime: library + Dagster code location
#   bash scripts/bootstrap.sh dev      # plus test tools and the test-only system packages
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-run}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
# This machine's pip config lists local wheel folders that may be absent: hide that noise.
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }
quiet $PIP install -q --upgrade pip >/dev/null
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "[bootstrap] installing torch==2.13.0 (CPU wheel)"
  quiet $PIP install -q torch==2.13.0
fi
if [ "$profile" = "dev" ]; then
  echo "[bootstrap] installing spotfleet[dev]"
  quiet $PIP install -q -e '.[dev]'
  if [ -f scripts/install_test_services.sh ]; then
    bash scripts/install_test_services.sh
  fi
else
  echo "[bootstrap] installing spotfleet[orchestration]"
  quiet $PIP install -q -e '.[orchestration]'
fi
echo "[bootstrap] done: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__)')"
