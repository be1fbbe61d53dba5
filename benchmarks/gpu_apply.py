"""The mask apply on GPU logits: `apply_token_bitmask_inplace` (one Triton kernel where Triton is installed) and
the torch-ops path per step for a batch of B rows of a V-token vocabulary, against a bare `masked_fill_` with a
ready bool mask (the floor any apply pays). Needs CUDA; writes results/gpu_apply.json and .md.

    python benchmarks/gpu_apply.py [--vocab 151936] [--batches 1,32,256] [--steps 200] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from tooldec.decoding.gpu_apply import _kernel
from tooldec.decoding.sampling import apply_token_bitmask_inplace, apply_with_torch_ops


def _time(fn, steps: int) -> list[float]:
    """Per-call GPU time in µs (CUDA events), after a warm-up."""
    for _ in range(10):
        fn()
    out = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1000)
    return out


def main() -> None:
    """Time both applies at each batch size and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--batches", default="1,32,256")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    words = (args.vocab + 31) // 32
    rows = []
    for b in (int(x) for x in args.batches.split(",")):
        host = rng.integers(-(2**31), 2**31, size=(b, words), dtype=np.int64).astype(np.int32)
        on_gpu = torch.from_numpy(host).cuda()
        logits = torch.randn(b, args.vocab, device="cuda")
        keep = torch.from_numpy(np.unpackbits(host.view(np.uint8), axis=1, bitorder="little")[:, : args.vocab]).bool().cuda()
        methods = {
            "apply_token_bitmask_inplace, numpy mask": lambda x=logits, m=host: apply_token_bitmask_inplace(x, m),
            "apply_token_bitmask_inplace, GPU mask": lambda x=logits, m=on_gpu: apply_token_bitmask_inplace(x, m),
            "torch ops (the path without Triton), GPU mask": lambda x=logits, m=on_gpu: apply_with_torch_ops(x, m),
            "masked_fill_ with a ready bool mask": lambda x=logits, k=keep: x.masked_fill_(~k, float("-inf")),
        }
        for name, fn in methods.items():
            t = _time(fn, args.steps)
            rows.append({"batch": b, "vocab": args.vocab, "method": name, "median_us": statistics.median(t),
                         "p99_us": float(np.percentile(t, 99))})
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name()
    doc = {"device": device, "torch": torch.__version__, "triton": _kernel() is not None, "steps": args.steps,
           "rows": rows}
    (args.out / "gpu_apply.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Mask apply on GPU logits ({device}, torch {torch.__version__}, {args.steps} steps, CUDA events)", "",
             "| B | V | method | median µs | p99 µs |", "|---:|---:|---|---:|---:|"]
    lines += [f"| {r['batch']} | {r['vocab']} | {r['method']} | {r['median_us']:.1f} | {r['p99_us']:.1f} |" for r in rows]
    (args.out / "gpu_apply.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
