"""MaskBench reports: a summary row per engine, the same figures on the files every engine compiled, each
engine's commonest refusals; a JSON document and a Markdown table."""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tooldec.bench.maskbench import EngineRun, FileOutcome, failure_text
from tooldec.bench.report import load_average

TOP_REASONS = 5
"""Refusal reasons listed per engine in the Markdown (the JSON has every file's)."""


def _percentile(samples: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation), rounded; None without samples."""
    return round(float(np.percentile(samples, q)), 3) if samples else None


def timings(outcomes: Sequence[FileOutcome]) -> dict[str, Any]:
    """Compile median and p90 (ms), first mask median and per-token mask + advance median and p99 (µs) of the
    compiled files among `outcomes`."""
    compiled = [o for o in outcomes if o.status == "compiled"]
    compile_ms = [o.compile_ms for o in compiled if o.compile_ms is not None]
    steps = [t for o in compiled for t in o.steps_us]
    return {
        "compile_ms_median": _percentile(compile_ms, 50),
        "compile_ms_p90": _percentile(compile_ms, 90),
        "first_mask_us_median": _percentile([t for o in compiled for t in o.first_mask_us], 50),
        "mask_us_median": _percentile(steps, 50),
        "mask_us_p99": _percentile(steps, 99),
        "mask_only_us_median": _percentile([t for o in compiled for t in o.mask_us], 50),
        "steps": len(steps),
    }


def summary(run: EngineRun) -> dict[str, Any]:
    """One engine's row: file counts by outcome, timings, and the verdicts on the compiled files' instances."""
    outs = run.outcomes
    compiled = [o for o in outs if o.status == "compiled"]
    row: dict[str, Any] = {
        "engine": run.engine, "version": run.version, "status": run.status, "reason": run.reason,
        "prep_ms": None if run.prep_ms is None else round(run.prep_ms, 1),
        "files": len(outs),
        "compiled": len(compiled),
        "failed": sum(o.status == "failed" for o in outs),
        "timeouts": sum(o.status == "timeout" for o in outs),
        "crashed": sum(o.status == "crashed" for o in outs),
        "empty": sum(o.status == "compiled" and o.reason != "" for o in outs),
    }
    row.update(timings(outs))
    for key in ("valid_total", "valid_accepted", "invalid_total", "invalid_rejected"):
        row[key] = sum(getattr(o, key) for o in compiled)
    row["wrong_verdicts"] = sum(len(o.wrong) for o in compiled)
    return row


def common_files(runs: Sequence[EngineRun]) -> list[str]:
    """The files every engine that ran compiled."""
    ran = [r for r in runs if r.status == "ok"]
    if not ran:
        return []
    sets = [{o.file for o in r.outcomes if o.status == "compiled"} for r in ran]
    return sorted(set.intersection(*sets))


def reasons(run: EngineRun, top: int = TOP_REASONS) -> list[tuple[str, int]]:
    """The commonest gists of the engine's failures, timeouts and crashes, with their counts."""
    return Counter(f"{o.status}: {failure_text(o.reason)}".replace("`", "'") for o in run.outcomes
                   if o.status != "compiled").most_common(top)


def file_entry(o: FileOutcome) -> dict[str, Any]:
    """One file's line in the JSON: outcome, compile ms, medians of its steps, verdicts, wrong ones."""
    return {
        "file": o.file, "status": o.status, "reason": failure_text(o.reason) if o.reason else "",
        "compile_ms": None if o.compile_ms is None else round(o.compile_ms, 3),
        "mask_us_median": _percentile(o.steps_us, 50), "mask_us_max": round(max(o.steps_us), 1) if o.steps_us else None,
        "steps": len(o.steps_us), "valid": [o.valid_accepted, o.valid_total],
        "invalid_rejected": [o.invalid_rejected, o.invalid_total], "wrong": o.wrong[:5],
    }


def document(runs: Sequence[EngineRun], settings: dict[str, Any], sample: Sequence[str]) -> dict[str, Any]:
    """The JSON report: when, where (load average at the end), settings, the sample, a row per engine, the same
    figures on the files every engine compiled, and every file's outcome per engine."""
    common = common_files(runs)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.machine(), "cpus": len(os.sched_getaffinity(0)),
                    "load_average_end": load_average()},
        "settings": settings,
        "sample": list(sample),
        "results": [summary(r) for r in runs],
        "common": {"files": len(common), "results": [
            {"engine": r.engine, **timings([o for o in r.outcomes if o.file in set(common)])}
            for r in runs if r.status == "ok"
        ]},
        "reasons": {r.engine: [[text, n] for text, n in reasons(r, top=50)] for r in runs},
        "files": {r.engine: [file_entry(o) for o in r.outcomes] for r in runs},
    }


def _num(value: float | None, digits: int = 1) -> str:
    """A figure for the table ('–' when absent)."""
    return "–" if value is None else f"{value:,.{digits}f}"


def _of(part: int, whole: int) -> str:
    """`part / whole (pct%)`."""
    return f"{part} / {whole}" + (f" ({100 * part / whole:.1f}%)" if whole else "")


def _label(row: dict[str, Any]) -> str:
    """The engine with its version (peers only)."""
    return f"{row['engine']} {row['version']}" if row.get("version") and row["engine"] != "tooldec" else row["engine"]


def markdown(doc: dict[str, Any]) -> str:
    """The report as Markdown: the main table, the common-files table, the commonest refusals per engine."""
    s, m = doc["settings"], doc["machine"]
    load = "/".join(f"{x:.2f}" for x in s["load_average_start"] or []), "/".join(
        f"{x:.2f}" for x in m["load_average_end"] or [])
    clock = ("the worker's CPU time (all its threads)" if s["clock"] == "cpu" else "elapsed (wall) time")
    lines = [
        "# MaskBench side by side",
        "",
        (
            f"{doc['date']}, {m['platform']}, {m['cpus']} CPUs, Python {m['python']}. Tokenizer {s['tokenizer']}; "
            f"{len(doc['sample'])} of {s['files_total']} files of `data/maskbench` (the smallest sha256 of "
            f"`{s['seed']}:<name>`). Each engine in its own worker process: one compile per file (cache off), "
            f"killed past {s['compile_timeout_s']:g} s (compile) or {s['walk_timeout_s']:g} s (walking a file's "
            f"instances); clock: {clock}. Load average (1/5/15 min) {load[0] or '?'} at start, {load[1] or '?'} "
            f"at end."
        ),
        *([s["note"]] if s.get("note") else []),
        "",
        (
            "Compile: ms, median and p90 over the files the engine compiled. Per token: mask + advance, µs, median "
            "and p99 over every token after the first of every valid instance walked; first mask: median µs. "
            "Valid accepted / invalid rejected: instances of the files the engine compiled, accepted when every "
            "token and EOS is allowed and accepted in one of two spellings, tooldec's canonical one (schema key "
            "order) or the value as written (both tokenized once, the same tokens for every engine)."
        ),
        "",
        ("| engine | files | compiled | failed | timeouts | crashed | compile median ms | p90 ms | first mask µs "
         "| mask+advance median µs | p99 µs | valid accepted | invalid rejected | status |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["results"]:
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"
        lines.append(
            f"| {_label(r)} | {r['files']} | {r['compiled']} | {r['failed']} | {r['timeouts']} | {r['crashed']} "
            f"| {_num(r['compile_ms_median'], 2)} | {_num(r['compile_ms_p90'], 1)} "
            f"| {_num(r['first_mask_us_median'], 0)} | {_num(r['mask_us_median'], 1)} | {_num(r['mask_us_p99'], 0)} "
            f"| {_of(r['valid_accepted'], r['valid_total'])} | {_of(r['invalid_rejected'], r['invalid_total'])} "
            f"| {status.replace('|', '/')} |"
        )
    common = doc["common"]
    if common["results"]:
        lines += [
            "",
            f"On the {common['files']} files every engine compiled:",
            "",
            "| engine | compile median ms | p90 ms | first mask µs | mask+advance median µs | p99 µs |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in common["results"]:
            lines.append(
                f"| {r['engine']} | {_num(r['compile_ms_median'], 2)} | {_num(r['compile_ms_p90'], 1)} "
                f"| {_num(r['first_mask_us_median'], 0)} | {_num(r['mask_us_median'], 1)} "
                f"| {_num(r['mask_us_p99'], 0)} |"
            )
    listed = [(engine, pairs) for engine, pairs in doc["reasons"].items() if pairs]
    if listed:
        lines += ["", "Commonest refusals (failed, timeout, crashed), per engine:"]
        for engine, pairs in listed:
            shown = "; ".join(f"{n}× `{text}`" for text, n in pairs[:TOP_REASONS])
            lines.append(f"- {engine}: {shown}")
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], folder: Path, stem: str) -> tuple[Path, Path]:
    """Write `<stem>.json` and `<stem>.md` into `folder`; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / f"{stem}.json", folder / f"{stem}.md"
    json_path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path.write_text(markdown(doc), encoding="utf-8")
    return json_path, md_path
