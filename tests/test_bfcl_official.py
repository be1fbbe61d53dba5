"""Our BFCL matcher against the leaderboard's own AST checker (bfcl-eval, in its own environment), over every
entry's possible answers and mutations of them, and over recorded model outputs. Skipped without that
environment (see tooldec.eval.bfcl_official)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tooldec.eval import data as datasets
from tooldec.eval.bfcl import check_entry
from tooldec.eval.bfcl_official import AST_CATEGORIES, available, official_accuracy, official_verdicts

SHARED = Path(os.environ.get("TOOLDEC_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
pytestmark = [
    pytest.mark.skipif(not available(), reason="bfcl-eval is not installed in its environment"),
    pytest.mark.skipif(not (SHARED / "data" / "bfcl").is_dir(), reason=f"no BFCL data in {SHARED} (set TOOLDEC_SHARED)"),
]
CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple")
RUNS = Path(__file__).resolve().parents[1] / "docs" / "results" / "runs"
def _pick(options: list[Any], which: int) -> tuple[bool, Any]:
    """(present, value): an option by index; an optional parameter (`""` among its options) may be left out."""
    value = options[which % len(options)]
    return value != "", value


def _answer_call(answer: dict[str, dict[str, list[Any]]], which: int) -> dict[str, dict[str, Any]]:
    ((name, params),) = answer.items()
    args = {}
    for p, options in params.items():
        present, value = _pick(options, which)
        if present:
            args[p] = value
    return {name: args}


def _mutants(call: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """Calls near an answer: another name, a parameter dropped or added, a value changed or retyped."""
    ((name, args),) = call.items()
    out = [("name", {name + "_x": args}), ("extra", {name: {**args, "zz_unknown": 1}})]
    for p, v in args.items():
        out.append((f"drop {p}", {name: {k: x for k, x in args.items() if k != p}}))
        if isinstance(v, bool):
            changed: Any = not v
        elif isinstance(v, int | float):
            changed = v + 1
        elif isinstance(v, str):
            changed = v + " zz"
        elif isinstance(v, list):
            changed = v[:-1] if v else ["zz"]
        else:
            changed = {}
        out.append((f"change {p}", {name: {**args, p: changed}}))
        if isinstance(v, int) and not isinstance(v, bool):
            out.append((f"float {p}", {name: {**args, p: float(v)}}))
        if isinstance(v, float) and v.is_integer():
            out.append((f"int {p}", {name: {**args, p: int(v)}}))
        if isinstance(v, int | float) and not isinstance(v, bool):
            out.append((f"str {p}", {name: {**args, p: str(v)}}))
    return out


def _cases() -> list[dict[str, Any]]:
    cases = []
    for category in CATEGORIES:
        for item in datasets.load_bfcl(category, SHARED).items:
            base = {"category": category, "functions": item.functions, "answer": item.possible_answer, "id": item.id}
            for which in (0, -1):
                calls = [_answer_call(a, which) for a in item.possible_answer]
                cases.append({**base, "output": calls, "variant": f"answer {which}"})
                cases.append({**base, "output": calls[::-1], "variant": f"answer {which} reversed"})
                for i in range(len(calls)):
                    for label, mutant in _mutants(calls[i]):
                        cases.append({**base, "output": [*calls[:i], mutant, *calls[i + 1:]], "variant": label})
                if len(calls) > 1:
                    cases.append({**base, "output": calls[:-1], "variant": "a call short"})
    return cases


def _recorded() -> list[dict[str, Any]]:
    cases = []
    for results in sorted(RUNS.glob("bfcl-*/results.json")):
        doc = json.loads(results.read_text())
        category = doc["config"]["benchmark"].removeprefix("bfcl-").replace("-", "_")
        if category not in AST_CATEGORIES:  # irrelevance: BFCL scores whether a call was written, not its AST
            continue
        items = {i.id: i for i in datasets.load_bfcl(category, SHARED).items}
        for r in doc["records"]:
            item = items[r["id"]]
            cases.append({"category": category, "functions": item.functions, "answer": item.possible_answer,
                          "id": item.id, "output": r["prediction"], "variant": f"recorded {results.parent.name}"})
    return cases


def _disagreements(cases: list[dict[str, Any]]) -> list[str]:
    official = official_verdicts([{k: copy.deepcopy(c[k]) for k in ("category", "functions", "output", "answer")}
                                  for c in cases])
    out = []
    for case, theirs in zip(cases, official, strict=True):
        try:
            ours = check_entry(case["category"], case["functions"], case["output"], case["answer"])
        except (ValueError, TypeError) as exc:
            ours_valid, why = False, f"unmatchable: {exc}"
        else:
            ours_valid, why = ours.valid, ours.error_type
        if ours_valid != theirs["valid"]:
            out.append(f"{case['id']} {case['variant']}: ours {ours_valid} ({why}), BFCL {theirs['valid']} "
                       f"({theirs['error_type']}) on {json.dumps(case['output'])[:300]}")
    return out


def test_both_checkers_agree_on_every_possible_answer_and_its_mutants() -> None:
    cases = _cases()
    assert len(cases) > 10_000
    disagreements = _disagreements(cases)
    assert not disagreements, f"{len(disagreements)} of {len(cases)}:\n" + "\n".join(disagreements[:40])


def test_both_checkers_agree_on_recorded_model_outputs() -> None:
    cases = _recorded()
    if not cases:
        pytest.skip("no recorded BFCL runs")
    disagreements = _disagreements(cases)
    assert not disagreements, f"{len(disagreements)} of {len(cases)}:\n" + "\n".join(disagreements[:40])


def test_a_run_is_scored_by_both_checkers(tmp_path: Path) -> None:
    items = datasets.load_bfcl("simple", SHARED).items[:2]
    right = [_answer_call(a, 0) for a in items[0].possible_answer]
    wrong = [{name + "_x": args} for call in (_answer_call(a, 0) for a in items[1].possible_answer)
             for name, args in call.items()]
    records = [{"id": items[0].id, "prediction": right, "correct": True},
               {"id": items[1].id, "prediction": wrong, "correct": True}]  # the second verdict is wrong on purpose
    run = tmp_path / "bfcl-simple-x-tooldec"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"config": {"benchmark": "bfcl-simple"}, "records": records}))
    row = official_accuracy(run, SHARED)
    assert row is not None
    assert (row["n"], row["ours"], row["official"], row["disagreements"]) == (2, 2, 1, [items[1].id])
