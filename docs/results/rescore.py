"""Score the recorded calls of BFCL runs again with the current syntax checker, without the model.

A BFCL record keeps the text the model wrote; its verdicts (`syntax_error`, `calls`) come from the checker of the
code that ran it. When the checker changes (bad935a: closed objects declare their required keys), this brings
finished and partial runs to the current one: each record's text goes through `tooldec.eval.runners.bfcl_calls`,
the reading the runner scores with. Accuracy does not depend on these verdicts and is left as it is. Prints one
line per run that changed.

Usage: python docs/results/rescore.py RUN_DIR [RUN_DIR ...]   (needs $TOOLDEC_SHARED or ../shared)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tooldec.eval import data as datasets
from tooldec.eval import report
from tooldec.eval.runners import bfcl_calls
from tooldec.specs import from_openai_tools


def rescore(folder: Path, root: str) -> tuple[int, int]:
    """Score `folder`'s records again in place; returns (records whose verdicts changed, records)."""
    doc = report.load_results(folder / report.RESULTS_FILE)
    config = doc["config"]
    if not config["benchmark"].startswith("bfcl-") or config.get("compressed"):
        return 0, len(doc["records"])
    items = {item.id: item for item in datasets.load_bfcl(config["benchmark"], root).items}
    changed = 0
    for record in doc["records"]:
        specs = from_openai_tools(items[record["id"]].functions)
        kind, calls, _ = bfcl_calls(specs, record["text"], record["finish_reason"], config["decoding"])
        if (kind, calls) != (record["syntax_error"], record["calls"]):
            changed += 1
            record["syntax_error"], record["calls"] = kind, calls
    if changed:
        report.write_results(folder, config, doc["records"], doc["data"], model=doc["model"], notes=doc["notes"],
                             partial=not doc["complete"], environments=doc.get("environments", []))
    return changed, len(doc["records"])


def main(folders: list[str]) -> int:
    """Rescore every folder; print the runs that changed."""
    root = os.environ.get("TOOLDEC_SHARED", "../shared")
    for folder in sorted(folders):
        changed, total = rescore(Path(folder), root)
        if changed:
            print(f"{Path(folder).name}: {changed} of {total} records' verdicts changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
