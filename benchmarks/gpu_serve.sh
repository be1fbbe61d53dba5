#!/usr/bin/env bash
# The serving table's vLLM setups on one GPU (issue 36's GPU check): vLLM unguided, vLLM --tool-strict-level
# parameter and vLLM + tooldec, 50 BFCL simple entries at 1/8/32 clients in auto (1-shot) and required; tokens/s,
# invalid calls, BFCL-correct. Runs only where CUDA and a vLLM build for it are present (it is never part of CI):
#
#   VLLM_PYTHON=/path/to/venv/bin/python benchmarks/gpu_serve.sh [MODEL_FOLDER] [OUT_DIR]
#
# VLLM_PYTHON: a python with a CUDA build of vLLM and this checkout of tooldec installed (`pip install -e .`).
# MODEL_FOLDER: the model vLLM serves (default: the embedded SmolLM2, converted from its GGUF, which needs the
# PyPI wheel or the tooldec cache). About 5 minutes on one H200: three server starts, 18 levels of 50 requests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${VLLM_PYTHON:-python}"
MODEL="${1:-}"
OUT="${2:-${OUT:-benchmarks/results}}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_serve: no NVIDIA GPU here; nothing run"; exit 0
fi
if ! "$PY" -c "import torch, vllm, tooldec.integrations.vllm; assert torch.cuda.is_available()" >/dev/null 2>&1; then
  echo "gpu_serve: $PY lacks a CUDA build of vLLM, or tooldec; set VLLM_PYTHON (see the header)"; exit 1
fi
nvidia-smi -L
args=(--vllm-python "$PY" --setups vllm,vllm-strict,vllm+tooldec --entries 50 --clients 1,8,32
      --tool-choice auto-1shot,required --rounds 1 --cuda --out "$OUT" --stem serving_gpu --timeout 120)
if [ -n "$MODEL" ]; then args+=(--vllm-model "$MODEL"); fi
timeout 480 python benchmarks/serving_table.py "${args[@]}"
