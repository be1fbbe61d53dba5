#!/bin/bash
# A frozen environment for the evaluation chains: a venv holding a non-editable install of HEAD (as committed)
# with the library versions every full pass so far used, so that later edits to the tree cannot reach a cell
# that is half way. Usage: docs/results/frozen_env.sh VENV, then run the chains from the tree with
#   PATH=VENV/bin:$PATH setsid nohup nice -n 10 bash docs/results/commands.sh MODEL > LOG 2>&1 &
# (commands.sh writes into this tree's docs/results/runs, so commit those as the runs go).
set -eu
cd "$(dirname "$0")/../.."
venv=$1
tmp=$(mktemp -d)
tree=$tmp/tree
git worktree add --quiet --detach "$tree" HEAD
rev=$(git -C "$tree" rev-parse --short HEAD)  # the commit installed, even if HEAD moves while this runs
trap 'git worktree remove --force "$tree"; rm -rf "$tmp"' EXIT
python -m venv "$venv"
"$venv/bin/pip" install --quiet torch==2.13.0  # the CPU wheel; an unpinned torch pulls CUDA
"$venv/bin/pip" install --quiet transformers==5.24.0 tokenizers==0.23.3 numpy==2.4.6 safetensors==0.8.0 \
  gguf==0.19.0 accelerate==1.15.0 scikit-build-core==1.1.2 pybind11==3.1.0
echo "$rev" > "$tree/src/tooldec/REVISION"  # what results.json records as the code's commit
"$venv/bin/pip" install --quiet --no-build-isolation "$tree[models]"
echo "$venv: tooldec at $rev, torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
