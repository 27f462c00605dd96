#!/usr/bin/env bash
# The main job: set up (if needed), then reproduce the paper's headline, Fig. 5 of Hayase &
# Karakida (2024): at a fixed connection budget Ω a wider (so sparser) effective MLP has lower
# test error, for S-Mixers, RP S-Mixers and SW-MLPs. cpu scale on real Fashion-MNIST, under the
# frozen confirmatory protocol (src/mlplab/experiments/data/protocols/fig5.json): SW-MLPs at
# Ω = 2^14 (m = 147, 245, 588), S-Mixers and RP S-Mixers at Ω = 2^18 (m = 1440, 2768, 4096),
# 30 epochs on all 60k images, fresh seeds 3-7, plus one 2x longer run per point (convergence);
# 54 runs, two at a time, then the figure and a report with one verdict per family.
# What to expect and how long: README "The two commands"; the committed report of the same
# protocol is docs/results/fig5-cpu-*/report.md. Killed, it resumes where it stopped when run again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec mlplab reproduce fig5 --scale cpu --confirm --jobs 2 "$@"
