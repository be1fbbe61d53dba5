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


def _structured_block() -> str:
    """The Python example of the README's "Structured outputs" section."""
    section = (ROOT / "README.md").read_text().split("## Structured outputs\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)[0]


def _check_structured_lines(lines: list[str]) -> None:
    """Each printed value has the form its output type guarantees."""
    lark = pytest.importorskip("lark")
    city, point, date, sentiment, expression, call, digits = lines[-7:]
    assert city.startswith("City(name='") and "population=" in city, city
    assert point.startswith("Point(x=") and ", y=" in point, point
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) and sentiment in ("positive", "negative")
    lark.Lark('start: NUM (("+" | "*") NUM)*\nNUM: /[0-9]+/', parser="lalr").parse(expression)
    assert call.startswith("ParsedCall(name='multiply', arguments={'a': ")
    assert re.fullmatch(r"[0-9]*", digits), digits  # cut by max_new_tokens, or ended by EOS: digits only


def test_readme_structured_example_runs_on_a_tiny_model(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], tiny_llama) -> None:  # type: ignore[no-untyped-def]
    """The example as written, its `load_model()` answering a tiny random Llama (EOS, quotes and braces boosted so
    that outputs end):
    the API it calls exists and every value has its form."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pydantic")
    from test_serve import _tokenizer

    from tooldec.backends.loader import LoadedModel
    from tooldec.vocab import Vocabulary

    hf = _tokenizer()
    vocab = Vocabulary.from_hf(hf)
    model = tiny_llama(vocab.size, seed=4)
    boost = torch.zeros(vocab.size)
    for token, weight in (("<|im_end|>", 8.0), ('"', 8.0), ("}", 8.0), (",", 4.0)):  # what ends a value
        boost[hf.convert_tokens_to_ids(token)] = weight
    model.lm_head.register_forward_hook(lambda _m, _i, out: out + boost)
    lm = LoadedModel(model, hf, vocab, "tiny", "test", 0.0)
    monkeypatch.setattr("tooldec.backends.load_model", lambda *_a, **_k: lm)
    exec(compile(_structured_block(), "README.md", "exec", dont_inherit=True), {"__name__": "readme"})  # noqa: S102
    _check_structured_lines(capsys.readouterr().out.strip().splitlines())


@pytest.mark.slow
def test_readme_structured_example_runs_on_the_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    """The example on the embedded default model (fetched once): every value has its form, and the README shows
    what it prints."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    exec(compile(_structured_block(), "README.md", "exec", dont_inherit=True), {"__name__": "readme"})  # noqa: S102
    lines = capsys.readouterr().out.strip().splitlines()
    _check_structured_lines(lines)
    section = (ROOT / "README.md").read_text().split("## Structured outputs\n", 1)[1]
    shown = re.findall(r"```text\n(.*?)```", section, re.DOTALL)[0].strip().splitlines()
    assert lines[-7:] == shown
