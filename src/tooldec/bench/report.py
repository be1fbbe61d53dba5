"""Reports: ratios of each peer's figures to tooldec's, a JSON document and a Markdown table."""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tooldec.bench.runner import CellResult

RATIO_FIGURES = {
    "prep_ms": "prep_ratio",
    "compile_ms": "compile_ratio",
    "mask_us_median": "mask_median_ratio",
    "mask_us_p99": "mask_p99_ratio",
    "first_mask_us": "first_mask_ratio",
    "request_ms": "request_ratio",
    "rss_mb": "rss_ratio",
}
"""Figure → the key of its ratio (peer / tooldec: above 1 means tooldec is ahead)."""

RATIO_FLOORS = {"rss_mb": 0.5}
"""Figures whose ratio is left out when tooldec's value is below the floor (RSS growth under 0.5 MB is noise)."""

BATCH_RATIO_FIGURES = {
    "step_us_median": "step_median_ratio",
    "step_us_p99": "step_p99_ratio",
    "fill_us_median": "fill_median_ratio",
    "fill_us_p99": "fill_p99_ratio",
    "advance_us_median": "advance_median_ratio",
}
"""Batch figure → the key of its ratio (peer / tooldec at the same batch size)."""


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set each row's ratios to tooldec's figures in the same workload and tokenizer (in place; returned)."""
    ours = {(r["workload"], r["tokenizer"]): r for r in rows if r["engine"] == "tooldec" and r["status"] == "ok"}
    for row in rows:
        base = ours.get((row["workload"], row["tokenizer"]), {})
        for figure, key in RATIO_FIGURES.items():
            mine, theirs = row.get(figure), base.get(figure)
            usable = mine is not None and theirs and theirs >= RATIO_FLOORS.get(figure, 0.0)
            row[key] = round(mine / theirs, 3) if usable else None
        base_batch = {e["batch_size"]: e for e in base.get("batch", []) if e.get("status") == "ok"}
        for entry in row.get("batch", []):
            theirs_entry = base_batch.get(entry["batch_size"], {})
            for figure, key in BATCH_RATIO_FIGURES.items():
                mine, theirs = entry.get(figure), theirs_entry.get(figure)
                entry[key] = round(mine / theirs, 3) if mine is not None and theirs else None
    return rows


def rows(results: list[CellResult]) -> list[dict[str, Any]]:
    """Flat JSON objects, each with its ratios to tooldec's figures in the same workload and tokenizer."""
    return add_ratios([r.as_dict() for r in results])


def document(results: list[CellResult], settings: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: when, where (load average now included), with which settings, and the rows; with
    batch figures, what each engine's batch step calls (`batch_methods`)."""
    from tooldec.bench.engines import ENGINES

    doc = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.machine(), "cpus": _cpus(), "load_average_end": load_average()},
        "settings": settings,
        "results": rows(results),
    }
    if any(r.batch for r in results):
        drivers = {name: ENGINES[name].batch_driver for name in dict.fromkeys(r.engine for r in results)
                   if name in ENGINES}
        doc["batch_methods"] = {name: dict(d.methods) for name, d in drivers.items() if d is not None}
    return doc


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the system has none)."""
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _cpus() -> int:
    """CPUs this process may run on."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def _fmt(value: float | None, digits: int = 1) -> str:
    """A figure for the table ('–' when absent)."""
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _with_ratio(row: dict[str, Any], figure: str, digits: int) -> str:
    """`value (×ratio)` for a peer, the plain value for tooldec."""
    return _ratio_text(row[figure], row.get(RATIO_FIGURES[figure]), digits, row["engine"] == "tooldec")


def _ratio_text(value: float | None, ratio: float | None, digits: int, ours: bool) -> str:
    """`value (×ratio)` for a peer, the plain value for tooldec."""
    text = _fmt(value, digits)
    if not ours and ratio is not None:
        text += f" (×{ratio:,.0f})" if ratio >= 10 else f" (×{ratio:.2g})"
    return text


def _engine_label(row: dict[str, Any]) -> str:
    """The engine with its version (peers only)."""
    if row.get("version") and not str(row["engine"]).startswith("tooldec"):
        return f"{row['engine']} {row['version']}"
    return str(row["engine"])


def _load_text(doc: dict[str, Any]) -> str:
    """`load average a → b` (1-minute figures at start and end) when known."""
    start, end = doc["settings"].get("load_average_start"), doc["machine"].get("load_average_end")
    if not start and not end:
        return ""
    def fmt(la: list[float] | None) -> str:
        return "/".join(f"{x:.2f}" for x in la) if la else "?"

    return f" Load average (1/5/15 min) {fmt(start)} at start, {fmt(end)} at end."


def batch_markdown(doc: dict[str, Any]) -> list[str]:
    """The batch table's lines (none without batch figures)."""
    entries = [(row, e) for row in doc["results"] for e in row.get("batch", [])]
    if not entries:
        return []
    s = doc["settings"]
    lines = [
        "",
        "## Batch: fill + apply per step",
        "",
        (
            f"Per step, B rows (each its own sequence at its own position in the forced calls) get their masks "
            f"filled into an int32[B, ceil(V/32)] bitmask by the engine's batch API, which is applied to float32 "
            f"logits [B, V] (V = the tokenizer's vocabulary). Median and p99 over {s.get('batch_steps')} steps "
            f"per B, µs, on {s.get('batch_threads')} thread(s) per engine (torch too); the advance of every row "
            f"(each engine's accept/consume) is timed apart, outside fill + apply. Warm: every timed position "
            f"was visited by the batch-vs-single-row mask check before timing. (×r) = peer / tooldec at the same B."
        ),
        "",
        (
            "| workload | tokenizer | engine | B | fill+apply median µs | p99 µs | fill median µs | fill p99 µs "
            "| advance median µs | status |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row, e in sorted(entries, key=lambda re: (re[0]["tokenizer"], re[0]["workload"], re[1]["batch_size"])):
        ours = row["engine"] == "tooldec"
        status = e["status"] if e["status"] == "ok" else f"{e['status']}: {e.get('reason', '')}"
        lines.append(
            f"| {row['workload']} | {row['tokenizer']} | {_engine_label(row)} | {e['batch_size']} "
            f"| {_ratio_text(e.get('step_us_median'), e.get('step_median_ratio'), 1, ours)} "
            f"| {_ratio_text(e.get('step_us_p99'), e.get('step_p99_ratio'), 0, ours)} "
            f"| {_ratio_text(e.get('fill_us_median'), e.get('fill_median_ratio'), 1, ours)} "
            f"| {_ratio_text(e.get('fill_us_p99'), e.get('fill_p99_ratio'), 0, ours)} "
            f"| {_ratio_text(e.get('advance_us_median'), e.get('advance_median_ratio'), 1, ours)} "
            f"| {status.replace('|', '/')} |"
        )
    methods = doc.get("batch_methods", {})
    if methods:
        lines += ["", "What each engine's batch step calls:"]
        for name, m in methods.items():
            lines.append(f"- {name}: fill `{m.get('fill')}`; apply `{m.get('apply')}`; advance `{m.get('advance')}`.")
    return lines


def markdown(doc: dict[str, Any]) -> str:
    """Markdown tables of every row (single-row figures, then batch figures); ratios are peer / tooldec (above 1:
    tooldec is ahead)."""
    s = doc["settings"]
    lines = [
        "# tooldec bench",
        "",
        (
            f"{doc['date']}, {doc['machine']['platform']}, {doc['machine']['cpus']} CPUs, Python "
            f"{doc['machine']['python']}; repeats {s.get('repeats')}.{_load_text(doc)}"
        ),
        *([s["note"]] if s.get("note") else []),
        (
            "Times: tokenizer preparation and compile in ms (preparation: what each engine builds once per "
            "tokenizer, tooldec's pinned walks of plain values and llguidance's slices included; compile: median "
            "of repeats, tool-set caches off); per-token "
            "mask + advance in µs (median and p99 over the steps after the first, pooled over repeats, each on "
            "a fresh compile); first mask in µs; request: compile, start and every mask and advance of one call, "
            "ms, median (what a request with a new tool set pays for guidance); memory: largest RSS growth over "
            "one compile + forced call, MB. "
            "(×r) = peer / tooldec: above 1, tooldec is ahead. "
            + (
                "Clock: the process's CPU time (all its threads), not elapsed time, so that other jobs on the "
                "machine do not inflate the figures."
                if s.get("clock") == "cpu"
                else "Clock: elapsed (wall) time."
            )
        ),
        "",
        (
            "| workload | tokenizer | engine | prep ms | compile ms | mask+advance median µs | p99 µs "
            "| first mask µs | request ms | RSS MB | status |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in doc["results"]:
        status = row["status"] if row["status"] == "ok" else f"{row['status']}: {row['reason']}"
        lines.append(
            f"| {row['workload']} | {row['tokenizer']} | {_engine_label(row)} | {_with_ratio(row, 'prep_ms', 0)} "
            f"| {_with_ratio(row, 'compile_ms', 1)} | {_with_ratio(row, 'mask_us_median', 1)} "
            f"| {_with_ratio(row, 'mask_us_p99', 0)} | {_with_ratio(row, 'first_mask_us', 0)} "
            f"| {_with_ratio(row, 'request_ms', 2)} | {_with_ratio(row, 'rss_mb', 1)} | {status.replace('|', '/')} |"
        )
    notes = sorted({f"{r['workload']}: {r['note']}" for r in doc["results"] if r.get("note")})
    if notes:
        lines += ["", "Notes:", *[f"- {n}" for n in notes]]
    lines += batch_markdown(doc)
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], folder: Path, stem: str = "bench") -> tuple[Path, Path]:
    """Write `<stem>.json` and `<stem>.md` into `folder`; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / f"{stem}.json", folder / f"{stem}.md"
    json_path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path.write_text(markdown(doc), encoding="utf-8")
    return json_path, md_path
