"""Check the runs behind docs/results.md: ToolDec never makes a syntax error; print the calls each run started.

Usage: python docs/results/check.py RUN_DIR [RUN_DIR ...]   (folders written by `tooldec eval`)
Exits 1 if any ToolDec record has a syntax error or any of its calls is invalid.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path


def main(folders: list[str]) -> int:
    """Print one Markdown row per run (calls by verdict) and return 1 if a ToolDec run has an invalid call."""
    print("| run | items | calls started | valid | format | name | argument | cut off by the token limit |")
    print("|---|---|---|---|---|---|---|---|")
    failed = []
    for folder in sorted(folders):
        doc = json.loads((Path(folder) / "results.json").read_text())
        kinds = collections.Counter(c["kind"] or "valid" for r in doc["records"] for c in r.get("calls", []))
        counts = " | ".join(str(kinds[k]) for k in ("valid", "format", "name", "argument", "truncated"))
        print(f"| {Path(folder).name} | {len(doc['records'])} | {sum(kinds.values())} | {counts} |")
        if doc["config"]["decoding"] == "tooldec":
            bad = [r["id"] for r in doc["records"] if r.get("syntax_error") is not None]
            bad += [k for k in kinds if k not in ("valid", "truncated")]
            if bad:
                failed.append(f"{folder}: {bad[:5]}")
    for line in failed:
        print(f"ToolDec syntax error in {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
