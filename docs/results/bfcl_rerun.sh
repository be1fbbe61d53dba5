#!/bin/bash
# Issue 37's BFCL reruns with the current reading of calls (the chat layer: parallel calls in every syntax, bare
# objects read): Qwen2.5-Coder on the llama.cpp backend (every mode of a comparison on the same backend), into
# docs/results/runs/<cell>-qwen2.5-coder-0.5b-<mode>[-required]-llamacpp. The earlier transformers runs stay beside
# them. Usage: docs/results/bfcl_rerun.sh [N] (N = only the first N items of each cell); two chains at once share
# the work through the locks of docs/results/ev.sh. Then docs/results/build.sh rebuilds the tables.
set -u
cd "$(dirname "$0")/../.."
m=qwen2.5-coder-0.5b; n=${1:-all}
source docs/results/ev.sh
for c in parallel parallel-multiple; do
  modes bfcl-$c 8 --backend llamacpp
  modes bfcl-$c 8 --tool-choice required --backend llamacpp
done
for c in simple multiple irrelevance; do modes bfcl-$c 8 --backend llamacpp; done
