#!/usr/bin/env bash
# Accept a GPU machine: the first thing to run on one (see docs/gpu.md). Sets up .venv like the
# test command, then runs scripts/gpu_check.py (one PASS/FAIL line per check, a JSON summary).
#   bash scripts/gpu_check.sh                     # every check, < 10 min on one H100
#   bash scripts/gpu_check.sh --quick             # a fast pass
#   bash scripts/gpu_check.sh --out gpu_check.json
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python scripts/gpu_check.py "$@"
