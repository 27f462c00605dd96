#!/usr/bin/env bash
# Set up (if needed) and run the main job: Fig. 6 (test error vs (S, C) at a fixed connection
# budget) at the quick scale on real Fashion-MNIST: the S ≈ C twins and both ends, 3 seeds,
# trained on all 60k images, then aggregation, figure and a report whose verdict comes from
# paired tests across the seeds. The report's path is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec mlplab reproduce fig6 --scale quick --jobs 2 "$@"
