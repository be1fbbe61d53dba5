"""The main job end to end on the embedded default model (Qwen2.5-Coder-0.5B-Instruct, fetched on first use)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tooldec.toolsets import FUNCQA_FUNCTIONS

pytestmark = pytest.mark.slow
pytest.importorskip("torch")
pytest.importorskip("transformers")

QUESTION = "What is 3.14 times 123?"


def run_main_job(*flags: str) -> dict:  # type: ignore[type-arg]
    """`tooldec run QUESTION --json` in a fresh process; its last stdout line is the result object."""
    done = subprocess.run(
        [sys.executable, "-m", "tooldec", "run", QUESTION, "--json", *flags],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_run_answers_right_and_starts_warm() -> None:
    guided = run_main_job()
    warm = run_main_job()  # the prompt's fixed start now comes from the prefix cache, whatever the first run did
    free = run_main_job("--no-guidance")
    print("\nguided:", json.dumps(guided), "\nfree:  ", json.dumps(free))  # for the issue note (pytest -s)
    assert guided["calls"], guided
    for call in guided["calls"]:
        fn = FUNCQA_FUNCTIONS[call["name"]]
        assert all(isinstance(v, int | float) for v in call["arguments"].values())
        assert math.isclose(call["result"], fn(**call["arguments"]), rel_tol=1e-12)
    assert guided["answer"] is not None and math.isclose(float(guided["answer"]), 3.14 * 123, rel_tol=1e-6)
    assert guided["tokens"] > 0 and guided["seconds"] > 0
    assert warm["warm_start"]["stored"] and warm["warm_start"]["prefix_tokens"] > 300
    assert (warm["answer"], warm["text"]) == (guided["answer"], guided["text"])
