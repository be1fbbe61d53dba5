"""Decoding with linear layers on oneDNN-packed weights (tooldec.backends.packed_linear, what `load_model` does
by default) against transformers' nn.Linear (MKL sgemm), on the same prompts.

Each model is loaded twice (`packed=False` and the default), the prompts of `benchmarks/shared_prefix.py` (a
synthetic tool list, then varied questions) are decoded greedily from a shared prefix at each batch size, both
ways alternately, `--repeats` times; the table gives the median wall and CPU seconds (the process's, so a busy
machine skews both alike), the CPU ratio, the prefix's prefill both ways, and whether both wrote the same tokens.
Not a test: figures depend on the load.

    python benchmarks/packed_linear.py [--models smollm2,qwen2.5-coder-0.5b] [--batches 1,8]
        [--prefix-tokens 2000] [--new-tokens 32] [--repeats 2] [--out benchmarks/results] [--stem packed_linear]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from rich.progress import track
from shared_prefix import prompts, report, run

from tooldec.backends import load_model
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.prefix import PromptPrefix

WAYS = ("nn.Linear", "packed")


def prefill(model: Any, head: list[int]) -> tuple[PromptPrefix, float]:
    """The prefix's KV cache and the CPU seconds its forward pass took."""
    cpu = time.process_time()
    prefix = PromptPrefix.build(model, head)
    return prefix, time.process_time() - cpu


def main() -> None:
    """Time both ways per model and batch size; write JSON + Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,qwen2.5-coder-0.5b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prefix-tokens", type=int, default=2000)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--stem", default="packed_linear")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    results: list[dict[str, Any]] = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        lms = {"nn.Linear": load_model(name, packed=False), "packed": load_model(name)}
        head, rows = prompts(lms["packed"], args.prefix_tokens, max(batches))
        prefixes, prefill_s = {}, {}
        for way, lm in lms.items():
            prefixes[way], prefill_s[way] = prefill(lm.model, head)
        decoders = {way: Decoder(lm.model, lm.vocab) for way, lm in lms.items()}
        for batch in batches:
            times: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
            tokens: dict[str, list] = {}
            for _ in track(range(args.repeats), description=f"{name} batch {batch}"):
                for way in WAYS:
                    wall, cpu, tokens[way] = run(decoders[way], rows[:batch], prefixes[way], args.new_tokens)
                    times[way].append((wall, cpu))
            row: dict[str, Any] = {"model": name, "batch": batch, "same_tokens": tokens[WAYS[0]] == tokens[WAYS[1]]}
            for way in WAYS:
                row[f"{way}_wall_s"] = round(statistics.median(w for w, _ in times[way]), 2)
                row[f"{way}_cpu_s"] = round(statistics.median(c for _, c in times[way]), 2)
                row[f"{way}_prefill_cpu_s"] = round(prefill_s[way], 2)
            row["cpu_ratio"] = round(row["nn.Linear_cpu_s"] / row["packed_cpu_s"], 2)
            row["generated_tokens"] = sum(len(t) for t in tokens["packed"])
            results.append(row)
        del lms, decoders, prefixes
    columns = [
        "model",
        "batch",
        "nn.Linear: wall s (CPU s)",
        "packed: wall s (CPU s)",
        "CPU ratio",
        "prefill CPU s (nn.Linear, packed)",
        "same tokens",
    ]
    rows = [
        [
            r["model"],
            str(r["batch"]),
            f"{r['nn.Linear_wall_s']} ({r['nn.Linear_cpu_s']})",
            f"{r['packed_wall_s']} ({r['packed_cpu_s']})",
            f"{r['cpu_ratio']}",
            f"{r['nn.Linear_prefill_cpu_s']}, {r['packed_prefill_cpu_s']}",
            str(r["same_tokens"]),
        ]
        for r in results
    ]
    title = f"prefix {args.prefix_tokens} tokens, {args.new_tokens} new tokens a row"
    report("packed_linear.py", args, results, title, columns, "|---|---:|---:|---:|---:|---|---|", rows)


if __name__ == "__main__":
    main()
