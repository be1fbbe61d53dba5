"""Score the recorded calls of BFCL and RestBench runs again with the current syntax checker, without the model.

A BFCL record keeps the text the model wrote; its verdicts (`syntax_error`, `calls`) come from the checker of the
code that ran it. When the checker changes (bad935a: closed objects declare their required keys), this brings
finished and partial runs to the current one: each record's text goes through `tooldec.eval.runners.bfcl_calls`,
the reading the runner scores with, and its calls are judged again (`bfcl_verdict`: since 2026-11-29 a call the
text repeats is left out, as the one reader leaves it out). Prints one line per run that changed.

A RestBench record keeps each action's text, not the whole text. Before stop 28 an action cut off by the token
limit was stored with a newline added, which closed a name the model never finished (`Action: ` read as an empty
name, a name error); such an action is judged again as written, without that newline. (Where the model had
written the newline itself, this reads its name as unfinished: that changes a verdict only for a name that is a
strict prefix of a tool's name, and never for ToolDec, whose names are whole.)

Usage: python docs/results/rescore.py RUN_DIR [RUN_DIR ...]   (needs $TOOLDEC_SHARED or ../shared)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tooldec.eval import data as datasets
from tooldec.eval import report
from tooldec.eval.restbench_sim import RestSimulator
from tooldec.eval.runners.bfcl import bfcl_calls, bfcl_verdict
from tooldec.eval.runners.restbench import react_checker
from tooldec.eval.runners.scoring import Attempt, classify
from tooldec.specs import from_openai_tools

CUT_OFF = "cut off by the token limit"


def rescore(folder: Path, root: str) -> tuple[int, int]:
    """Score `folder`'s records again in place; returns (records whose verdicts changed, records)."""
    doc = report.load_results(folder / report.RESULTS_FILE)
    config = doc["config"]
    if config["benchmark"].startswith("restbench-"):
        changed = _rescore_cut_actions(doc["records"], config, root)
    elif not config["benchmark"].startswith("bfcl-") or config.get("compressed"):
        return 0, len(doc["records"])
    else:
        changed = _rescore_bfcl(doc["records"], config, root)
    if changed:
        report.write_results(folder, config, doc["records"], doc["data"], model=doc["model"], notes=doc["notes"],
                             partial=not doc["complete"], environments=doc.get("environments", []))
    return changed, len(doc["records"])


def _rescore_cut_actions(records: list[dict], config: dict, root: str) -> int:
    """Judge each RestBench action the token limit cut off as written (see the module's docstring)."""
    sim = RestSimulator(datasets.load_restbench(config["benchmark"], root).spec)
    checker = react_checker(sim.tools, config["decoding"])
    changed = 0
    for record in records:
        calls = []
        for call in record["calls"]:
            if CUT_OFF in call["message"] and call["text"].endswith("\n"):
                text = call["text"][:-1]
                check = classify(checker, Attempt(text, False), fuzzy=config["decoding"] == "fuzzy")
                call = {"text": text, "kind": check.kind, "message": check.message[:200]}
            calls.append(call)
        kind = next((c["kind"] for c in calls if c["kind"] not in (None, "truncated")), None)
        if (kind, calls) != (record["syntax_error"], record["calls"]):
            changed += 1
            record["syntax_error"], record["calls"] = kind, calls
    return changed


def _rescore_bfcl(records: list[dict], config: dict, root: str) -> int:
    """Read each BFCL record's text again with `bfcl_calls` and judge its calls again."""
    data = datasets.load_bfcl(config["benchmark"], root)
    items = {item.id: item for item in data.items}
    changed = 0
    for record in records:
        item = items[record["id"]]
        kind, calls, made = bfcl_calls(from_openai_tools(item.functions), record["text"], record["finish_reason"],
                                       config["decoding"])
        correct, why = bfcl_verdict(data.category, item, made)
        scored = {"syntax_error": kind, "calls": calls, "prediction": [{c.name: c.arguments} for c in made],
                  "correct": correct, "error_type": why}
        if any(record.get(k) != v for k, v in scored.items()):
            changed += 1
            record.update(scored)
    return changed


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
