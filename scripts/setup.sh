#!/usr/bin/env bash
# Idempotent setup on a fresh machine: Fashion-MNIST (Debian package), a venv in .venv with
# the local CPU build of torch 2.13.0 (installed first, so nothing pulls another torch), and
# mlplab itself in editable mode with its test extras (pytest, submitit for the Slurm path).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) \
      || echo "setup: could not install dataset-fashion-mnist; Fashion-MNIST runs will need data.root=FOLDER"
  else
    echo "setup: not root; install Debian's dataset-fashion-mnist for the real-data runs"
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  python -m pip install -q "torch==2.13.0"
fi
python -m pip install -q -e ".[test]"
python -c "import torch, mlplab; print('setup: torch', torch.__version__, '| mlplab', mlplab.__version__)"
