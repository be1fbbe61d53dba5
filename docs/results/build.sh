#!/bin/bash
# Rebuild the combined table, plots and call verdicts from the run folders docs/results/commands.sh writes
# (docs/results/runs). docs/results.md itself is written by hand around these.
set -eu
cd "$(dirname "$0")/../.."
rm -f docs/results/accuracy_errors*.png docs/results/kamel_tools.png
tooldec eval-report docs/results/runs/*/ --out docs/results
python docs/results/check.py docs/results/runs/*/ > docs/results/calls.md
