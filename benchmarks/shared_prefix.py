"""Decoding a batch whose rows share a long prompt prefix: the prefix read once a step (shared-prefix attention)
against the prefix copied into every row (transformers' SDPA over each row's whole cache).

A benchmark batch looks like this: a tool list of thousands of tokens (RestBench TMDB's is about 5,000), then
each item's question; so do a server's requests that carry the same tools. Both ways run greedily on the same
prompts, one after the other, each `--repeats` times, through `Decoder.generate` (a benchmark batch) and through
`ContinuousBatch` (the server's batch: the rows join together after an earlier request left the prefix's cache); the table gives wall and CPU seconds (the process's, so a busy machine skews both alike), the
ratio, the prefix keys and values each way holds, and whether both wrote the same tokens. Not a test: figures depend on the load.

    python benchmarks/shared_prefix.py [--models smollm2,qwen2.5-coder-0.5b] [--batch 8] [--prefix-tokens 5000]
        [--new-tokens 48] [--repeats 2] [--out benchmarks/results] [--stem shared_prefix]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import track
from rich.table import Table

from tooldec.backends import load_model
from tooldec.bench.workloads import synthetic_tools
from tooldec.decoding import FreeController
from tooldec.decoding.decoder import ContinuousBatch, Decoder
from tooldec.decoding.prefix import PromptPrefix

QUESTIONS = [
    "Which tool lists the orders of a customer?",
    (
        "Find the weather in Paris tomorrow and convert the temperature to Fahrenheit, then tell me whether I "
        "need a coat, an umbrella, or both, and explain which tools you would call for each step and why."
    ),
    "Delete user 42.",
    "Summarise what the first ten tools do, in one sentence each, naming their required parameters.",
]


def prompts(lm: Any, prefix_tokens: int, batch: int) -> tuple[list[int], list[list[int]]]:
    """The shared head (synthetic tool documentation cut to `prefix_tokens`) and `batch` prompts of varied length."""
    docs = "\n".join(json.dumps(t.to_openai()) for t in synthetic_tools(400))
    head = lm.vocab.encode("You can call these tools:\n" + docs)[:prefix_tokens]
    rows = [
        head + lm.vocab.encode(f"\nQuestion {i}: {QUESTIONS[i % len(QUESTIONS)]}\nAnswer:")
        for i in range(batch)
    ]
    return head, rows


def run(
    decoder: Decoder, rows: list[list[int]], prefix: PromptPrefix, new_tokens: int
) -> tuple[float, float, list]:
    """One greedy batch: wall seconds, CPU seconds, and each row's tokens."""
    cpu = time.process_time()
    start = time.perf_counter()
    gens = decoder.generate(
        rows, [FreeController(decoder.vocab, None) for _ in rows], prefix=prefix, max_new_tokens=new_tokens
    )
    return time.perf_counter() - start, time.process_time() - cpu, [g.tokens for g in gens]


def serve(decoder: Decoder, rows: list[list[int]], new_tokens: int) -> tuple[float, float, list]:
    """The same rows joining a server's ContinuousBatch together, once an earlier request with the same tools
    (the first row's prompt, run first and not timed) has left its cache behind: wall seconds, CPU seconds, and
    each row's tokens."""
    batch = ContinuousBatch(decoder)
    batch.add(rows[0], FreeController(decoder.vocab, None), max_new_tokens=1)
    while len(batch):
        batch.step()
    cpu = time.process_time()
    start = time.perf_counter()
    added = [batch.add(r, FreeController(decoder.vocab, None), max_new_tokens=new_tokens) for r in rows]
    while len(batch):
        batch.step()
    return time.perf_counter() - start, time.process_time() - cpu, [r.gen.tokens for r in added]


def kv_mb(prefix: PromptPrefix) -> float:
    """Megabytes of one copy of the prefix's keys and values."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in prefix.layers) / 2**20


def main() -> None:
    """Time both ways per model and write JSON + Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,qwen2.5-coder-0.5b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prefix-tokens", type=int, default=5000)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--stem", default="shared_prefix")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        lm = load_model(name)
        decoder = Decoder(lm.model, lm.vocab)
        head, rows = prompts(lm, args.prefix_tokens, args.batch)
        prefix = PromptPrefix.build(lm.model, head)
        if not decoder.shares_prefix:
            results.append({"model": name, "error": "this model's attention cannot share a prefix"})
            continue
        paths = {
            "Decoder.generate": partial(run, decoder, rows, prefix, args.new_tokens),
            "ContinuousBatch": partial(serve, decoder, rows, args.new_tokens),
        }
        for path, go in paths.items():
            times: dict[str, list[tuple[float, float]]] = {"shared": [], "copied": []}
            tokens: dict[str, list] = {}
            for _ in track(range(args.repeats), description=f"{name}, {path}"):
                for way in ("copied", "shared"):
                    decoder.shares_prefix = way == "shared"
                    wall, cpu, tokens[way] = go()
                    times[way].append((wall, cpu))
            decoder.shares_prefix = True
            row: dict[str, Any] = {"model": name, "path": path, "same_tokens": tokens["shared"] == tokens["copied"]}
            for way in ("copied", "shared"):
                row[f"{way}_wall_s"] = round(statistics.median(w for w, _ in times[way]), 2)
                row[f"{way}_cpu_s"] = round(statistics.median(c for _, c in times[way]), 2)
            row["cpu_ratio"] = round(row["copied_cpu_s"] / row["shared_cpu_s"], 2)
            row["wall_ratio"] = round(row["copied_wall_s"] / row["shared_wall_s"], 2)
            row["copied_prefix_kv_mb"] = round(kv_mb(prefix) * args.batch)
            row["shared_prefix_kv_mb"] = round(kv_mb(prefix))
            row["generated_tokens"] = sum(len(t) for t in tokens["shared"])
            results.append(row)
    title = f"batch {args.batch}, prefix {args.prefix_tokens} tokens, {args.new_tokens} new tokens a row"
    columns = [
        "model",
        "path",
        "copied: wall s (CPU s)",
        "shared: wall s (CPU s)",
        "CPU ratio copied / shared",
        "wall ratio",
        "prefix KV MB (copied, shared)",
        "same tokens",
    ]
    rows = [
        [r["model"], "", f"not run: {r['error']}", "", "", "", "", ""]
        if "error" in r
        else [
            r["model"],
            r["path"],
            f"{r['copied_wall_s']} ({r['copied_cpu_s']})",
            f"{r['shared_wall_s']} ({r['shared_cpu_s']})",
            f"{r['cpu_ratio']}",
            f"{r['wall_ratio']}",
            f"{r['copied_prefix_kv_mb']}, {r['shared_prefix_kv_mb']}",
            str(r["same_tokens"]),
        ]
        for r in results
    ]
    report("shared_prefix.py", args, results, title, columns, "|---|---|---:|---:|---:|---:|---|---|", rows)


def report(
    script: str,
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    title: str,
    columns: list[str],
    rule: str,
    rows: list[list[str]],
) -> None:
    """Write `results` to `<out>/<stem>.json` and `rows` as a Markdown table under the command, commit, date and
    load average to `<out>/<stem>.md`, and print the table (this script's and benchmarks/packed_linear.py's)."""
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True
        ).stdout.strip(),
        "settings": vars(args),
        "load_average_end": round(os.getloadavg()[0], 2),
        "results": results,
    }
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items())
    lines = [
        (
            f"`python benchmarks/{script} {flags}` at {doc['commit']}, {doc['date']}, "
            f"load average at the end {doc['load_average_end']} (2 cores)."
        ),
        "",
        "| " + " | ".join(columns) + " |",
        rule,
        *("| " + " | ".join(cells) + " |" for cells in rows),
    ]
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for cells in rows:
        table.add_row(*cells)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    Console().print(table)


if __name__ == "__main__":
    main()
