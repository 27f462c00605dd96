#!/usr/bin/env bash
# Set up (if needed) and run the main job: a quick reproduction on real data (Fashion-MNIST):
# train, aggregate, plot, report. The report's path is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec mlplab reproduce fig6 --scale cpu --jobs 2 "$@"
