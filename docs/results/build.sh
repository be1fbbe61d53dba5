#!/bin/bash
# Rebuild the combined table, plots and call verdicts from the run folders docs/results/commands.sh writes
# (docs/results/runs). docs/results.md itself is written by hand around these.
set -eu
cd "$(dirname "$0")/../.."
rm -f docs/results/accuracy_errors*.png docs/results/kamel_tools.png
tooldec eval-report docs/results/runs/*/ --out docs/results
python docs/results/check.py docs/results/runs/*/ > docs/results/calls.md
# BFCL runs by BFCL's own AST checker beside ours (needs bfcl-eval in its environment: tooldec.eval.bfcl_official)
python docs/results/bfcl_official.py docs/results/runs/bfcl-*/ > docs/results/bfcl_official.md
