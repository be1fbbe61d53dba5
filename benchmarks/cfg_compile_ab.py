"""Before/after table of CFG compile times from alternating `tooldec bench` runs of two builds.

Each run is a `tooldec bench --engines tooldec,llguidance --workloads cfg-... --out DIR` of one build; the runs
alternate (before, after, before, after, ...) so that the machine's load weighs on both alike. Per cell the table
gives the median over runs of each run's compile median (tooldec before and after; llguidance pooled over every
run), and tooldec's per-token mask+advance median and p99 before and after.

    python benchmarks/cfg_compile_ab.py --before DIR1 DIR3 --after DIR2 DIR4 --out benchmarks/results/cfg_compile
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _rows(folder: Path) -> list[dict]:
    """The result rows of one run's bench.json."""
    return json.loads((folder / "bench.json").read_text())["results"]


def _load(folder: Path) -> float:
    """The run's load average (1 min) at start."""
    return float(json.loads((folder / "bench.json").read_text())["settings"]["load_average_start"][0])


def main() -> None:
    """Read the runs, write `<out>.md` and `<out>.json`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="CFG compile before and after")
    args = parser.parse_args()
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    for side, folders in (("before", args.before), ("after", args.after)):
        for folder in folders:
            for row in _rows(folder):
                if row["status"] != "ok":
                    continue
                cell = cells.setdefault((row["workload"], row["tokenizer"]), {})
                if row["engine"].startswith("llguidance"):
                    cell.setdefault("llguidance_compile", []).append(row["compile_ms"])
                elif row["engine"] == "tooldec":
                    cell.setdefault(f"{side}_compile", []).append(row["compile_ms"])
                    cell.setdefault(f"{side}_median_us", []).append(row["mask_us_median"])
                    cell.setdefault(f"{side}_p99_us", []).append(row["mask_us_p99"])
    med = {key: {k: statistics.median(v) for k, v in cell.items()} for key, cell in cells.items()}
    lines = [f"# {args.title}", "",
             (f"Runs alternating before/after: before {', '.join(f.name for f in args.before)}; after "
             f"{', '.join(f.name for f in args.after)}. Load (1 min) at each run's start: before "
             f"{', '.join(str(_load(f)) for f in args.before)}; after {', '.join(str(_load(f)) for f in args.after)}."),
             "Each figure: the median over runs of the run's median (3 repeats); llguidance pooled over every run.",
             "Process CPU clock.", "",
             ("| workload | tokenizer | compile ms before | after | llguidance | after / llguidance "
             "| mask+advance median µs before | after | p99 µs before | after |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (workload, tok), m in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(f"| {workload} | {tok} | {m['before_compile']:.2f} | {m['after_compile']:.2f} | "
                     f"{m['llguidance_compile']:.2f} | {m['after_compile'] / m['llguidance_compile']:.2f} | "
                     f"{m['before_median_us']:.1f} | {m['after_median_us']:.1f} | {m['before_p99_us']:.0f} | "
                     f"{m['after_p99_us']:.0f} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(
        {"before": [f.name for f in args.before], "after": [f.name for f in args.after],
         "cells": [{"workload": w, "tokenizer": t, "runs": cells[(w, t)], "medians": m}
                   for (w, t), m in sorted(med.items())]}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
