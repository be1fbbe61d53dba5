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
