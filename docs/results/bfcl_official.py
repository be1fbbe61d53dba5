"""BFCL accuracy of every run folder by BFCL's own AST checker beside ours, as a Markdown table on stdout.

    python docs/results/bfcl_official.py docs/results/runs/bfcl-*/ > docs/results/bfcl_official.md

Needs bfcl-eval in its own environment (tooldec.eval.bfcl_official) and $TOOLDEC_SHARED (or ../shared).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tooldec.eval.bfcl_official import available, official_accuracy


def main(folders: list[str]) -> int:
    if not available():
        print("bfcl-eval is not installed in its environment (see tooldec.eval.bfcl_official)", file=sys.stderr)
        return 2
    shared = Path(os.environ.get("TOOLDEC_SHARED", Path(__file__).resolve().parents[3] / "shared"))
    print("| run | items | ours | BFCL's checker | disagreements |")
    print("|---|---:|---:|---:|---|")
    for folder in sorted(folders):
        row = official_accuracy(Path(folder.rstrip("/")), shared)
        if row is None or not row["n"]:
            continue
        n = row["n"]
        print(f"| {row['run']} | {n} | {row['ours'] / n:.1%} | {row['official'] / n:.1%} | "
              f"{', '.join(row['disagreements']) or 'none'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
