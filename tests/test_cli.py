"""The `tooldec sample` and `tooldec check-schemas` commands, on a tokenizer saved from a fixture; the warm start
of `tooldec run --format chat` on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from tooldec.cli import app

TOOLS = [
    {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "echo", "description": "Echo.", "parameters": {"type": "dict", "properties": {"text": {"type": "string", "maxLength": 5}, "loud": {"type": "boolean"}}, "required": ["text"]}}},
]


def _files(tmp_path: Path, tok: Tokenizer) -> tuple[Path, Path]:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    tokenizer = tmp_path / "tokenizer.json"
    tok.save(str(tokenizer))
    return tools, tokenizer


def test_sample_prints_valid_calls(tmp_path: Path, bytelevel_tokenizer: Tokenizer) -> None:
    tools, tokenizer = _files(tmp_path, bytelevel_tokenizer)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    schemas["echo"] = {**schemas["echo"], "type": "object"}
    for fmt in ("json", "python"):
        result = CliRunner().invoke(
            app, ["sample", "--tools", str(tools), "--tokenizer", str(tokenizer), "--format", fmt, "--n", "8", "--seed", "3"]
        )
        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        assert len(lines) == 8
        for line in lines:
            assert set(line) == {"text", "name", "arguments", "tokens"}
            jsonschema.validate(line["arguments"], schemas[line["name"]])
            assert line["tokens"] > 0


def test_sample_reports_bad_tools_clearly(tmp_path: Path, bytelevel_tokenizer: Tokenizer) -> None:
    tools, tokenizer = _files(tmp_path, bytelevel_tokenizer)
    tools.write_text(json.dumps(TOOLS + TOOLS[:1]))
    result = CliRunner().invoke(app, ["sample", "--tools", str(tools), "--tokenizer", str(tokenizer)])
    assert result.exit_code == 2
    assert "duplicate" in result.output and "add" in result.output


def test_check_schemas_summary(tmp_path: Path, bytelevel_tokenizer: Tokenizer) -> None:
    _, tokenizer = _files(tmp_path, bytelevel_tokenizer)
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "ok.json").write_text(json.dumps({
        "schema": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}, "required": ["n"], "additionalProperties": False},
        "tests": [{"valid": True, "data": {"n": 2}}, {"valid": False, "data": {"n": 4}}, {"valid": False, "data": {}}],
    }))
    (folder / "unsupported.json").write_text(json.dumps({"schema": {"type": "array", "uniqueItems": True}, "tests": []}))
    result = CliRunner().invoke(app, ["check-schemas", str(folder), "--tokenizer", str(tokenizer), "--json", "--verbose"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert len(lines) == 3
    assert summary["files"] == 2 and summary["compiled"] == 1 and summary["unsupported"] == 1 and summary["crashed"] == 0
    assert (summary["valid_total"], summary["valid_accepted"]) == (1, 1)
    assert (summary["invalid_total"], summary["invalid_rejected"]) == (2, 2)
    assert summary["compile_ms_median"] is not None


def test_run_chat_answers_the_same_from_the_stored_prefix(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch, bytelevel_tokenizer: Tokenizer, bytelevel_vocab, tiny_llama
) -> None:
    """`tooldec run --format chat`'s path: the template's tool instructions are stored once, then every round of
    every later answer starts from them, writing what a run without the store writes."""
    transformers = pytest.importorskip("transformers")
    from tooldec.agents.executor import ToolExecutor
    from tooldec.backends.loader import LoadedModel
    from tooldec.cli import answer, make_agent
    from tooldec.decoding import SamplingParams
    from tooldec.specs import ToolSet
    from tooldec.toolsets import FUNCQA_FUNCTIONS, funcqa_tools

    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer)
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    lm = LoadedModel(tiny_llama(bytelevel_vocab.size, seed=2), tokenizer, bytelevel_vocab, "tiny", "test", 0.0)
    tools = ToolSet([t for t in funcqa_tools() if t.name in ("add", "multiply")])
    executor = ToolExecutor({n: FUNCQA_FUNCTIONS[n] for n in tools.names}, tools)
    params = SamplingParams(temperature=1.0, seed=0)
    agent, render = make_agent(lm, executor, "chat", tool_choice="multiply", params=params, max_new_tokens=60)
    question = "What is 3.14 times 123?"
    plain, none = answer(agent, render, question, prefix_cache=False)
    cold, first = answer(agent, render, question)
    warm, second = answer(agent, render, question)
    assert none["prefix_tokens"] == 0 and first["prefix_tokens"] == second["prefix_tokens"] > 200
    assert (first["stored"], second["stored"]) == (False, True)
    assert plain.calls and plain.calls[0].name == "multiply"
    assert plain.text == cold.text == warm.text and plain.tokens == cold.tokens == warm.tokens


def test_sample_refuses_an_empty_tool_list(tmp_path: Path, bytelevel_tokenizer: Tokenizer) -> None:
    tools, tokenizer = _files(tmp_path, bytelevel_tokenizer)
    tools.write_text("[]")
    result = CliRunner().invoke(app, ["sample", "--tools", str(tools), "--tokenizer", str(tokenizer)])
    assert result.exit_code == 2, result.output
    assert "empty" in result.output
