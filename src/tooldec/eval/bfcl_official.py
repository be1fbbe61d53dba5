"""The Berkeley Function Calling Leaderboard's own AST checker, run in its own environment, to compare with ours.

`bfcl-eval` pins old dependencies (numpy and the model clients its handlers import), so it lives in a separate
virtual environment installed with `--no-deps` (`python -m venv ~/.cache/tooldec/venv-bfcl &&
~/.cache/tooldec/venv-bfcl/bin/pip install --no-deps bfcl-eval`; `TOOLDEC_BFCL_VENV` names another). Only
`bfcl_eval.eval_checker.ast_eval.ast_checker` is imported there; the model table it reads (which would import
every model client) is replaced by one entry for a model that keeps dots in function names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_DRIVER = r"""
import json, sys, types
table = types.ModuleType("bfcl_eval.constants.model_config")
table.MODEL_CONFIG_MAPPING = {"tooldec/check": types.SimpleNamespace(underscore_to_dot=False)}
sys.modules["bfcl_eval.constants.model_config"] = table
from bfcl_eval.constants.enums import Language
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
out = []
for case in json.load(sys.stdin):
    try:
        v = ast_checker(case["functions"], case["output"], case["answer"], Language.PYTHON, case["category"],
                        "tooldec_check")
        out.append({"valid": bool(v["valid"]), "error_type": v.get("error_type", "")})
    except Exception as exc:
        out.append({"valid": False, "error_type": "exception: " + type(exc).__name__ + ": " + str(exc)[:200]})
json.dump(out, sys.stdout)
"""


def venv() -> Path:
    """The virtual environment holding bfcl-eval."""
    return Path(os.environ.get("TOOLDEC_BFCL_VENV", Path.home() / ".cache" / "tooldec" / "venv-bfcl"))


def available() -> bool:
    """Whether bfcl-eval is installed in `venv()`."""
    python = venv() / "bin" / "python"
    return python.exists() and any(venv().glob("lib/python*/site-packages/bfcl_eval/eval_checker/ast_eval"))


def official_verdicts(cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's verdict on each case `{category, functions, output: [{name: args}], answer}` (one process for all)."""
    done = subprocess.run(
        [str(venv() / "bin" / "python"), "-c", _DRIVER], input=json.dumps(list(cases)), capture_output=True,
        text=True, check=True, timeout=600,
    )
    return json.loads(done.stdout)


AST_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple")
"""The BFCL categories its AST checker scores (irrelevance is scored by whether any call was written)."""


def official_accuracy(results: Path, shared: Path) -> dict[str, Any] | None:
    """One BFCL run folder's records scored by BFCL's checker beside ours: `{run, category, n, ours, official,
    disagreements}`; None for a run outside AST_CATEGORIES. Each record's prediction is what our checker read."""
    from tooldec.eval import data as datasets

    doc = json.loads((results / "results.json").read_text(encoding="utf-8"))
    category = doc["config"]["benchmark"].removeprefix("bfcl-").replace("-", "_")
    if category not in AST_CATEGORIES:
        return None
    items = {i.id: i for i in datasets.load_bfcl(category, shared).items}
    records = doc["records"]
    verdicts = official_verdicts([
        {"category": category, "functions": items[r["id"]].functions, "output": r["prediction"],
         "answer": items[r["id"]].possible_answer}
        for r in records
    ]) if records else []
    return {
        "run": results.name,
        "category": category,
        "n": len(records),
        "ours": sum(bool(r["correct"]) for r in records),
        "official": sum(v["valid"] for v in verdicts),
        "disagreements": [r["id"] for r, v in zip(records, verdicts, strict=True) if bool(r["correct"]) != v["valid"]],
    }
