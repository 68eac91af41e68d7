#!/usr/bin/env bash
# Issue 28's layout: move modules with `git mv` and rewrite every old import/path (see tools/relayout.py and
# tools/relayout-map.txt). Idempotent: re-run it on a merged tree whose new files still import old paths.
#   bash tools/relayout.sh        (from anywhere inside the repository)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
python3 tools/relayout.py
if [ -x .venv/bin/ruff ]; then
  # the split imports land where the old line was: let ruff put them in order
  .venv/bin/ruff check --quiet --fix --select I001 kubetrain tests benchmarks || true
fi
