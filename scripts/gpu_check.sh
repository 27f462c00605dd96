#!/usr/bin/env bash
# Accept a GPU node as it comes (docs/gpu.md): runs scripts/gpu_check.py with the first Python
# that imports a usable torch -- $PYTHON, the python3 on PATH, then this checkout's .venv -- as it
# is: no pip, no apt, no network. "Usable": torch at least pyproject.toml's floor, a CUDA build
# (a CPU build only with --device cpu). Only when none is usable does it run scripts/setup.sh
# (a venv and pip: needs the network).
#   FMNIST_DIR=/data/fashion-mnist bash scripts/gpu_check.sh --short --out results/gpu   # <= 7 min
#   bash scripts/gpu_check.sh --out results/gpu                                         # every check
set -uo pipefail
cd "$(dirname "$0")/.."

want_cpu=0
for arg in "$@"; do case "$arg" in cpu|--device=cpu) want_cpu=1 ;; esac; done

# exit 0 when "$1" imports a usable torch; prints what it found either way
probe() {
  "$1" - "$want_cpu" <<'EOF' 2>/dev/null
import re, sys
floor = tuple(int(v) for v in re.search(r'"torch>=(\d+)\.(\d+)"', open("pyproject.toml").read()).groups())
try:
    import torch
except Exception as e:
    print(f"gpu_check: {sys.executable}: no torch ({type(e).__name__})"); sys.exit(1)
have = tuple(int(v) for v in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
why = (f"torch {torch.__version__} is older than {floor[0]}.{floor[1]}" if have < floor else
       "a CPU build of torch" if torch.version.cuda is None and sys.argv[1] != "1" else None)
missing = []
for name in ("numpy", "safetensors"):
    try:
        __import__(name)
    except ImportError:
        missing.append(name)
if missing and why is None:
    why = "no " + " and no ".join(missing)
print(f"gpu_check: {sys.executable}: torch {torch.__version__}, CUDA {torch.version.cuda}" + (f": not usable, {why}" if why else ""))
sys.exit(1 if why else 0)
EOF
}

for py in ${PYTHON:-} python3 .venv/bin/python; do
  command -v "$py" >/dev/null 2>&1 || continue
  if probe "$py"; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    exec "$py" scripts/gpu_check.py "$@"
  fi
done

echo "gpu_check: no Python here imports a usable torch; running scripts/setup.sh (a venv and pip: needs the network)"
bash scripts/setup.sh || { echo "gpu_check: setup failed; install torch (>= the floor in pyproject.toml) for python3, or set PYTHON=/path/to/python" >&2; exit 2; }
. .venv/bin/activate
exec python scripts/gpu_check.py "$@"
