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
    "rss_mb": "rss_ratio",
}
"""Figure → the key of its ratio (peer / tooldec: above 1 means tooldec is ahead)."""

RATIO_FLOORS = {"rss_mb": 0.5}
"""Figures whose ratio is left out when tooldec's value is below the floor (RSS growth under 0.5 MB is noise)."""


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set each row's ratios to tooldec's figures in the same workload and tokenizer (in place; returned)."""
    ours = {(r["workload"], r["tokenizer"]): r for r in rows if r["engine"] == "tooldec" and r["status"] == "ok"}
    for row in rows:
        base = ours.get((row["workload"], row["tokenizer"]), {})
        for figure, key in RATIO_FIGURES.items():
            mine, theirs = row.get(figure), base.get(figure)
            usable = mine is not None and theirs and theirs >= RATIO_FLOORS.get(figure, 0.0)
            row[key] = round(mine / theirs, 3) if usable else None
    return rows


def rows(results: list[CellResult]) -> list[dict[str, Any]]:
    """Flat JSON objects, each with its ratios to tooldec's figures in the same workload and tokenizer."""
    return add_ratios([r.as_dict() for r in results])


def document(results: list[CellResult], settings: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: when, where, with which settings, and the rows."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.machine(), "cpus": _cpus()},
        "settings": settings,
        "results": rows(results),
    }


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
    text = _fmt(row[figure], digits)
    ratio = row.get(RATIO_FIGURES[figure])
    if row["engine"] != "tooldec" and ratio is not None:
        text += f" (×{ratio:,.0f})" if ratio >= 10 else f" (×{ratio:.2g})"
    return text


def markdown(doc: dict[str, Any]) -> str:
    """A Markdown table of every row; ratios are peer / tooldec (above 1: tooldec is ahead)."""
    s = doc["settings"]
    lines = [
        "# tooldec bench",
        "",
        (
            f"{doc['date']}, {doc['machine']['platform']}, {doc['machine']['cpus']} CPUs, Python "
            f"{doc['machine']['python']}; repeats {s.get('repeats')}."
        ),
        (
            "Times: tokenizer preparation and compile in ms (compile: median of repeats, cache off); per-token "
            "mask + advance in µs (median and p99 over the steps after the first, pooled over repeats, each on "
            "a fresh compile); first mask in µs; memory: largest RSS growth over one compile + forced call, MB. "
            "(×r) = peer / tooldec: above 1, tooldec is ahead."
        ),
        "",
        (
            "| workload | tokenizer | engine | prep ms | compile ms | mask+advance median µs | p99 µs "
            "| first mask µs | RSS MB | status |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in doc["results"]:
        status = row["status"] if row["status"] == "ok" else f"{row['status']}: {row['reason']}"
        if row.get("version") and row["engine"] != "tooldec":
            engine = f"{row['engine']} {row['version']}"
        else:
            engine = row["engine"]
        lines.append(
            f"| {row['workload']} | {row['tokenizer']} | {engine} | {_with_ratio(row, 'prep_ms', 0)} "
            f"| {_with_ratio(row, 'compile_ms', 1)} | {_with_ratio(row, 'mask_us_median', 1)} "
            f"| {_with_ratio(row, 'mask_us_p99', 0)} | {_with_ratio(row, 'first_mask_us', 0)} "
            f"| {_with_ratio(row, 'rss_mb', 1)} | {status.replace('|', '/')} |"
        )
    notes = sorted({f"{r['workload']}: {r['note']}" for r in doc["results"] if r.get("note")})
    if notes:
        lines += ["", "Notes:", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], folder: Path, stem: str = "bench") -> tuple[Path, Path]:
    """Write `<stem>.json` and `<stem>.md` into `folder`; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / f"{stem}.json", folder / f"{stem}.md"
    json_path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path.write_text(markdown(doc), encoding="utf-8")
    return json_path, md_path
