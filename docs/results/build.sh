#!/bin/bash
# Copy the eval runs (runs/full, written by docs/results/commands.sh) into docs/results/runs and rebuild the
# combined table and plots there. docs/results.md itself is written by hand around these.
set -eu
cd "$(dirname "$0")/../.."
rm -rf docs/results/runs && mkdir -p docs/results/runs
for run in runs/full/*/; do
  name=$(basename "$run")
  mkdir -p "docs/results/runs/$name" && cp "$run/results.json" "docs/results/runs/$name/"
done
rm -f docs/results/accuracy_errors*.png docs/results/kamel_tools.png
tooldec eval-report docs/results/runs/* --out docs/results
python docs/results/check.py docs/results/runs/* > docs/results/calls.md
