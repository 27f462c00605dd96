#!/usr/bin/env bash
# Mutation testing of the science core and beyond: scripts/mutation.sh [--survivors] [-j N] [MODULE...]
# (modules: scripts/mutation_targets.toml; report: mutation-report/; docs/testing.md).
# Runs at low priority; needs the dev extra (pip install -e '.[dev]') for mutmut.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f .venv/bin/activate ] && [ -z "${VIRTUAL_ENV:-}" ]; then . .venv/bin/activate; fi
exec nice -n 10 python scripts/mutation.py "$@"
