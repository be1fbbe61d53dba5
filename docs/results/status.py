"""The full passes' progress: one row per run folder under docs/results/runs (items done of the benchmark's
items, accuracy and syntax-error rate so far), as a Markdown table. Usage: python docs/results/status.py"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ITEMS = {"funcqa-oh": 60, "funcqa-mh": 68, "kamel": 500, "bfcl-simple": 400, "bfcl-multiple": 200,
         "bfcl-parallel": 200, "bfcl-parallel-multiple": 200, "bfcl-irrelevance": 240, "restbench-tmdb": 100,
         "restbench-spotify": 57}
"""Items of each benchmark in ../shared (KAMEL: at every number of tools)."""


def rows(runs: Path) -> list[str]:
    """A table row per run folder with a results.json."""
    out = []
    for folder in sorted(p for p in runs.iterdir() if (p / "results.json").is_file()):
        doc = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        config, records = doc.get("config", {}), doc.get("records", [])
        bench = config.get("benchmark", "?")
        cell = bench + (f" {config['tools']}" if config.get("tools") else "")
        cell += " (required)" if config.get("tool_choice") == "required" else ""
        cell += f" ({config['format']})" if bench.startswith("bfcl-") and config.get("format") not in (None, "hermes") else ""
        cell += " (compressed)" if config.get("compressed") else ""
        n = len(records)
        right = sum(bool(r.get("correct")) for r in records)
        errors = sum(bool(r.get("syntax_error")) for r in records)
        total = ITEMS.get(bench, 0)
        done = f"{n} / {total}" + (" (all)" if n == total else "")
        share = f"{100 * right / n:.1f}%" if n else "-"
        err = f"{100 * errors / n:.1f}%" if n else "-"
        model = re.sub(r"^embedded:", "", str(config.get("model", "?")))
        out.append(f"| {cell} | {model} | {config.get('decoding', '?')} | {done} | {share} | {err} |")
    return out


def main() -> None:
    """Print the table for the folder given (default docs/results/runs)."""
    runs = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "runs"
    print("| cell | model | decoding | items done | accuracy so far | syntax errors so far |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows(runs)))


if __name__ == "__main__":
    main()
