"""`tooldec eval`: run a benchmark item by item with a progress bar, saving after each item so a run can resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tooldec.eval import report
from tooldec.eval.runners import Benchmark, EvalError, prepare


def default_out(
    benchmark: str, model: str, decoding: str, tools: int | None, compressed: bool, tool_choice: str = "auto"
) -> Path:
    """`runs/<benchmark>[-K]-<model>-<decoding>[-compressed][-required]`."""
    name = benchmark + (f"-{tools}" if tools else "") + f"-{Path(model).name}-{decoding}"
    name += ("-compressed" if compressed else "") + ("-required" if tool_choice == "required" else "")
    return Path("runs") / name


def run_eval(
    benchmark: str,
    *,
    model: str,
    decoding: str,
    limit: int | None = None,
    tools: int | None = None,
    out: Path | None = None,
    shared: Path | None = None,
    resume: bool = False,
    compressed: Path | None = None,
    threads: int | None = None,
    batch_size: int = 8,
    replay: Path | None = None,
    tool_choice: str = "auto",
    call_format: str = "hermes",
    console: Console | None = None,
    backend: str = "transformers",
) -> dict[str, Any]:
    """Evaluate `model` on the first `limit` items of `benchmark` under `decoding`; returns the results document.

    Items are decoded `batch_size` at a time (one row each, greedy, so a batch gives each item the tokens it would
    get alone) and results are saved after every batch. `replay` (fuzzy decoding of a one-shot benchmark only)
    is a free run of the same configuration: its generations are scored again with fuzzy name matching instead
    of being decoded again, since free and fuzzy decoding write the same text from the same prompt. `backend`:
    transformers, llamacpp (the batch's rows are llama.cpp sequences of one context) or auto (tooldec.backends.loader).
    """
    if batch_size < 1:
        raise EvalError(f"batch size must be at least 1, not {batch_size}")
    from tooldec.backends.loader import load_with
    from tooldec.eval.compress import load_compressed

    console = console or Console(stderr=True)
    if benchmark == "kamel" and tools is None:
        tools = 30
    out = out or default_out(benchmark, model, decoding, tools, compressed is not None, tool_choice)
    config: dict[str, Any] = {
        "benchmark": benchmark,
        "model": model,
        "decoding": decoding,
        "tools": tools if benchmark == "kamel" else None,
        "compressed": os.fspath(compressed) if compressed else None,
        "limit": limit,
        "seed": None,
        "temperature": 0.0,
        "batch_size": batch_size,
    }
    if backend != "transformers":  # named only when not the default, so that earlier runs still resume
        config["backend"] = backend
    finished = _finished(out, config) if resume else None
    if finished is not None:
        console.print(f"{out / report.RESULTS_FILE} holds this run complete: nothing to resume")
        return finished
    short = load_compressed(compressed) if compressed else None
    lm = load_with(backend, model, threads=threads, sequences=batch_size, n_ctx=4096 * batch_size)
    bench = prepare(
        benchmark,
        lm,
        decoding,
        root=os.fspath(shared) if shared else None,
        tools=tools,
        compressed=short,
        tool_choice=tool_choice,
        call_format=call_format,
    )
    config.update({k: v for k, v in bench.config.items() if k not in config or config[k] is None})
    config["shared"] = os.fspath(shared) if shared else os.environ.get("TOOLDEC_SHARED", "../shared")
    records = report.resume_records(out, config) if resume else []
    environments = report.environments_with(out, report.environment()) if resume else [report.environment()]
    chosen = list(bench.items[:limit] if limit is not None else bench.items)
    todo = report.pending(chosen, records)
    ids = {item.id for item in chosen}
    records = [r for r in records if r.get("id") in ids]
    replays = _replay_records(replay, bench, config) if replay is not None else {}
    model_info = {"name": lm.name, "source": lm.source}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(_status(bench.name, records), total=len(chosen), completed=len(records))
        rescore = bench.replay
        if rescore is not None and replays:
            for item in [item for item in todo if item.id in replays]:
                records.append({**rescore(item, replays[item.id]), "replayed_from": "free"})
                bar.update(task, advance=1, description=_status(bench.name, records))
            todo = [item for item in todo if item.id not in replays]
        for first in range(0, len(todo), batch_size):
            batch = todo[first : first + batch_size]
            records.extend(bench.run_batch(batch))
            report.write_results(out, config, records, bench.files, model=model_info, notes=bench.notes, partial=True,
                                 environments=environments)
            bar.update(task, advance=len(batch), description=_status(bench.name, records))
    notes = bench.notes + ([compression_note(records)] if compressed else [])
    if replay is not None:
        done = sum(r.get("replayed_from") == "free" for r in records)
        notes.append(
            f"{done} of {len(records)} fuzzy records score the free run's generations ({os.fspath(replay)}) "
            "with fuzzy name matching; greedy decoding of the same prompt writes the same text in both modes."
        )
    doc = report.write_results(out, config, records, bench.files, model=model_info, notes=notes,
                               environments=environments)
    console.print(f"wrote {out / report.RESULTS_FILE}, {out / report.TABLE_FILE}, {out / report.MODES_PLOT}")
    return doc


def _finished(out: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The results document in `out` when it is this run (same configuration and limit) and complete, so resuming
    it would only load the model and write the same records again."""
    path = out / report.RESULTS_FILE
    if not path.exists():
        return None
    doc = report.load_results(path)
    earlier = doc.get("config", {})
    same = all(earlier.get(k) == config[k] for k in (*report.RESUME_KEYS, "limit") if k in config)
    return doc if same and doc.get("complete") else None


def _replay_records(path: Path, bench: Benchmark, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The records of the free run in `path`, by item id; EvalError unless it matches this fuzzy run."""
    if config["decoding"] != "fuzzy" or bench.replay is None:
        raise EvalError("--replay scores a free run again with fuzzy matching: only for --decoding fuzzy on "
                        "kamel and bfcl-* (one generation per item, no tool results fed back)")
    doc = report.load_results(path / report.RESULTS_FILE if path.is_dir() else path)
    earlier = doc.get("config", {})
    wanted = {**{k: config.get(k) for k in report.RESUME_KEYS}, "decoding": "free"}
    clashes = [k for k, v in wanted.items() if earlier.get(k) != v]
    if clashes:
        detail = ", ".join(f"{k}: {earlier.get(k)!r} != {wanted[k]!r}" for k in clashes)
        raise EvalError(f"{os.fspath(path)!r} is not a free run of this configuration ({detail})")
    return {r["id"]: r for r in doc.get("records", []) if "text" in r and "finish_reason" in r}


def compression_note(records: list[dict[str, Any]]) -> str:
    """Tokens per tool in the prompt with the full documentation and with the compressed descriptions."""
    full = [r["tokens_per_tool_uncompressed"] for r in records if "tokens_per_tool_uncompressed" in r]
    short = [r["tokens_per_tool"] for r in records if "tokens_per_tool_uncompressed" in r]
    if not full:
        return "compressed tool descriptions (no token counts recorded)"
    before, after = sum(full) / len(full), sum(short) / len(short)
    return f"compressed tool descriptions: {before:.1f} tokens per tool before, {after:.1f} after"


def _status(name: str, records: list[dict[str, Any]]) -> str:
    """Progress text: the benchmark, running accuracy and syntax-error rate."""
    if not records:
        return name
    acc = sum(bool(r.get("correct")) for r in records) / len(records)
    errs = sum(r.get("syntax_error") is not None for r in records) / len(records)
    return f"{name} acc {100 * acc:.1f}% syntax err {100 * errs:.1f}%"
