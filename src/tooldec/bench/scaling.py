"""Scaling figures (issue 5 items 3 and 4): compile time and memory against the number of tools and the
vocabulary size, and adding one tool to a compiled set against compiling the set again.

Each point runs in a fresh child process, so its memory figure is the growth of that process alone: resident
set size after compiling and forcing one call, minus before compiling (the tokenizer already prepared).
"""

from __future__ import annotations

import gc
import multiprocessing
from pathlib import Path
from typing import Any

from tooldec.bench.engines import ENGINES
from tooldec.bench.measure import median, now_us, rss_bytes
from tooldec.bench.runner import CaseCalls, prepare_calls
from tooldec.bench.workloads import Case, Workload, synthetic_tools
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

TOOL_COUNTS = (10, 30, 100, 300, 1000)
VOCAB_TOKENIZERS = ("mistral-v3", "smollm2", "llama3", "qwen2.5", "gemma3")


def _point(engine_name: str, tok_dir: str, n_tools: int, repeats: int) -> dict[str, Any]:
    """In a child process: compile `n_tools` synthetic tools `repeats` times and force one call each time.

    A 3-tool warm-up compile and mask come first, so one-time per-vocabulary work is not counted.
    """
    vocab = Vocabulary.from_file(tok_dir)
    eos_id = min(vocab.eos_ids)
    cls = ENGINES[engine_name]
    cls.preload()
    engine = cls(Path(tok_dir), vocab, eos_id)
    item: CaseCalls = prepare_calls(Workload("scaling", (Case("scaling", synthetic_tools(n_tools)),)), vocab,
                                    eos_id)[0]
    warm = engine.start(engine.compile(synthetic_tools(3)))
    warm.fill_mask()
    times, growth = [], []
    for r in range(repeats):
        gc.collect()
        before = rss_bytes()
        t0 = now_us()
        compiled = item.case.compile(engine)
        times.append((now_us() - t0) / 1000.0)
        session = engine.start(compiled)
        for token in item.calls[r % len(item.calls)]:
            session.fill_mask()
            session.advance(token)
        growth.append(rss_bytes() - before)
        del compiled, session
    return {"engine": engine_name, "tokenizer": Path(tok_dir).name, "vocab_size": vocab.size,
            "n_tools": n_tools, "compile_ms": median(times), "rss_mb": max(growth) / 2**20}


def measure_point(engine: str, tok_dir: Path, n_tools: int, repeats: int = 3) -> dict[str, Any]:
    """One scaling point, measured in a fresh process; a failing engine gives an `error` entry instead."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        try:
            return pool.apply(_point, (engine, str(tok_dir), n_tools, repeats))
        except Exception as exc:  # noqa: BLE001 - a peer failing at one size is a data point, not a crash
            return {"engine": engine, "tokenizer": tok_dir.name, "n_tools": n_tools, "error": str(exc)[:200]}


def add_one_tool(tok_dir: Path, counts: tuple[int, ...] = TOOL_COUNTS, repeats: int = 3) -> list[dict[str, Any]]:
    """tooldec: compiling N + 1 tools cold (every cache off, number grammars included) vs compiling them right after the N were compiled
    (a fresh Compiler each repeat, its per-tool automata and the vocabulary's region walks cached by the N).

    One warm-up compile first, so that per-vocabulary work done once (token arrays) favours neither side.
    """
    from tooldec.compiler import Compiler
    from tooldec.grammar.schema import clear_caches
    from tooldec.index import PreparedVocab

    prepared = PreparedVocab(Vocabulary.from_file(tok_dir))
    Compiler(prepared).compile(synthetic_tools(3), "json", use_cache=False).guide().bitmask()
    extra = ToolSpec("added_tool", "The one tool added.", {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]})
    rows = []
    for n in counts:
        tools = synthetic_tools(n)
        more = tools.with_tool(extra)
        cold, added = [], []
        for _ in range(repeats):
            clear_caches()
            t0 = now_us()
            Compiler(prepared).compile(more, "json", use_cache=False)
            cold.append((now_us() - t0) / 1000.0)
            compiler = Compiler(prepared)
            compiler.compile(tools, "json")
            t0 = now_us()
            compiler.compile(more, "json")
            added.append((now_us() - t0) / 1000.0)
        rows.append({
            "n_tools": n,
            "compile_cold_ms": median(cold),
            "compile_one_more_ms": median(added),
            "ratio": median(added) / median(cold),
        })
    return rows


def plot(points: list[dict[str, Any]], path: Path) -> None:
    """Two panels: compile time and memory against the number of tools and against vocabulary size (log axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    series = [("n_tools", "tools (llama3 vocabulary)", "by_tools"), ("vocab_size", "vocabulary size (200 tools)",
                                                                      "by_vocab")]
    for col, (x_key, x_label, group) in enumerate(series):
        rows = [p for p in points if p.get("group") == group and "error" not in p]
        for engine in dict.fromkeys(p["engine"] for p in rows):
            mine = sorted((p for p in rows if p["engine"] == engine), key=lambda p: p[x_key])
            xs = [p[x_key] for p in mine]
            axes[0][col].plot(xs, [p["compile_ms"] for p in mine], marker="o", label=engine)
            axes[1][col].plot(xs, [max(p["rss_mb"], 0.01) for p in mine], marker="o", label=engine)
        for row, y_label in enumerate(("compile ms (median)", "RSS growth MB")):
            ax = axes[row][col]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
