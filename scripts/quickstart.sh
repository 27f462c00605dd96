#!/usr/bin/env bash
# The main job: set up (if needed), then reproduce the paper's headline, Fig. 5 of Hayase &
# Karakida (2024): at a fixed connection budget Ω a wider (so sparser) effective MLP has lower
# test error, for S-Mixers, RP S-Mixers and SW-MLPs. cpu scale on real Fashion-MNIST: Ω = 2^14,
# 3 widths per family, 3 seeds, 12 epochs on all 60k images (27 runs, two at a time), then the
# figure and a report whose verdicts come from per-seed slope tests.
# Expect: 3 × HELD. Time: the `wall time` line of the committed report, docs/results/fig5-cpu-*/report.md.
# The report's path is printed at the end; fig6 (the S ≈ C optimum) is `mlplab reproduce fig6 --scale quick`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec mlplab reproduce fig5 --scale cpu --jobs 2 "$@"
