"""The README's Python examples run as written (the engine one reads ../shared; the model one fetches SmolLM2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_readme_python_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if not (ROOT.parent / "shared" / "tokenizers" / "llama3").exists():
        pytest.skip("../shared is not present")
    block = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)[1]
    monkeypatch.chdir(ROOT)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - runs our own README
    assert "True ParsedCall(name='multiply', arguments={'a': 3.14, 'b': 123}" in capsys.readouterr().out


@pytest.mark.slow
def test_readme_model_example_makes_a_valid_call(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    block = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)[0]
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - runs our own README
    name, _, args = capsys.readouterr().out.strip().splitlines()[-1].partition(" ")
    assert name in ("multiply", "add") and set(eval(args)) == {"a", "b"}


def test_readme_grammar_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    lark = pytest.importorskip("lark")
    block = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)[2]
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - runs our own README
    accepted, sentence = capsys.readouterr().out.splitlines()[:2]
    assert accepted == "True"
    lark.Lark(str(namespace["grammar"]), parser="lalr").parse(sentence)
