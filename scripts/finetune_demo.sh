#!/usr/bin/env bash
# The fine-tuning demonstration on real Fashion-MNIST (docs/pretrained.md): pre-train a small
# MLP-Mixer at 28x28, fine-tune it at 56x56 through expand_resolution with Scaling-MLPs' recipe
# (SGD, 0.01 head / 0.001 body), and train a linear probe (frozen body, LION 1e-5). Each run's
# results.json holds its test accuracy and wall time; a summary line per run is printed at the
# end. Extra arguments are overrides for all three runs (e.g. schedule.epochs=1). MLPLAB
# overrides the command (default: set up .venv and use its mlplab).
# Expect: ~87% / ~71% / ~86% test accuracy. Time: ~2.5 min on 2 CPU cores in fp32
# (benchmarks/results/finetune-demo-pt213-epyc-avx2.json).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MLPLAB:-}" ]; then
  bash scripts/setup.sh
  MLPLAB=.venv/bin/mlplab
fi
OUT=${OUT:-runs/finetune-demo}
$MLPLAB train fmnist_mixer_pretrain run.out_dir=$OUT run.name=pretrain "$@" --overwrite
$MLPLAB finetune $OUT/pretrain fmnist_finetune run.out_dir=$OUT run.name=finetune-56 "$@" --overwrite
$MLPLAB finetune $OUT/pretrain fmnist_linear_probe run.out_dir=$OUT run.name=linear-probe "$@" --overwrite
for r in pretrain finetune-56 linear-probe; do
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(f'{sys.argv[2]:<13} test acc {100 * d[\"test_acc\"]:.2f}%  {d[\"wall_s\"] / 60:.1f} min  load {d[\"loadavg\"][0]:.1f}')" \
    "$OUT/$r/results.json" "$r"
done
