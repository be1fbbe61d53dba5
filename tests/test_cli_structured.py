"""`tooldec sample --regex | --schema | --choice | --grammar`: every printed output matches, validates or is an
option, with or without a tokenizer; exactly one source; bad input is a clear error with exit 2. `tooldec run
--output-schema | --output-regex` on a tiny random model: the answer validates or matches."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from tooldec.cli import app

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0},
                                           "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                                                    "maxItems": 3}},
          "required": ["id", "tags"], "additionalProperties": False}
PATTERN = r"[0-9]{2,4}-[a-z]+"


def sample(*args: str) -> list[dict[str, object]]:
    """The JSON lines of a successful `tooldec sample ... --json`."""
    result = CliRunner().invoke(app, ["sample", *args, "--json"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("with_tokenizer", [False, True], ids=["bytes", "tokenizer"])
def test_sampled_outputs_are_valid(tmp_path: Path, bytelevel_tokenizer: Tokenizer, with_tokenizer: bool) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    grammar = tmp_path / "list.gbnf"
    grammar.write_text('root ::= "[" [0-9]+ ("," [0-9]+)* "]"\n')
    tok: list[str] = []
    if with_tokenizer:
        bytelevel_tokenizer.save(str(tmp_path / "tokenizer.json"))
        tok = ["--tokenizer", str(tmp_path / "tokenizer.json")]
    for line in sample("--schema", str(schema), "-n", "6", "--seed", "1", *tok):
        assert set(line) == {"text", "value", "tokens"} and line["value"] == json.loads(str(line["text"]))
        jsonschema.validate(line["value"], SCHEMA)
    for line in sample("--regex", PATTERN, "-n", "6", *tok):
        assert re.fullmatch(PATTERN, str(line["value"])) and line["value"] == line["text"]
    options = ["yes", "no", "not sure"]
    seen = {line["value"] for line in sample("--choice", ",".join(options), "-n", "12", *tok)}
    assert seen <= set(options) and len(seen) > 1
    for line in sample("--grammar", str(grammar), "-n", "4", *tok):
        assert re.fullmatch(r"\[[0-9]+(,[0-9]+)*\]", str(line["text"]))


def test_raw_texts_without_json() -> None:
    result = CliRunner().invoke(app, ["sample", "--regex", PATTERN, "-n", "3"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(re.fullmatch(PATTERN, line) for line in lines)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "give exactly one of --tools, --grammar, --regex, --schema, --choice"),
        (["--regex", "a", "--choice", "a,b"], "not --regex and --choice"),
        (["--regex", "(?<=a)b"], "--regex: terminal regex"),
        (["--regex", "(a"], "not a valid regular expression"),
        (["--schema", "{not json}"], "--schema: the schema is not valid JSON"),
        (["--schema", "{\"type\": \"integer\", \"minimum\": 3, \"maximum\": 1}"], "no value satisfies"),
        (["--schema", "{\"type\": \"array\", \"items\": {\"type\": \"object\"}, \"uniqueItems\": true}"],
         "uniqueItems"),
        (["--schema", "missing.json"], "No such file"),
        (["--grammar", "start: missing"], "line 1"),
    ],
    ids=["none", "two", "lookaround", "bad-regex", "not-json", "empty-schema", "unsupported", "no-file",
         "bad-grammar"],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, args: list[str], words: str) -> None:
    if args and args[0] in ("--schema", "--grammar") and args[1] != "missing.json":
        path = tmp_path / ("input.json" if args[0] == "--schema" else "input.lark")
        path.write_text(args[1])
        args = [args[0], str(path)]
    elif args and args[1] == "missing.json":
        args = [args[0], str(tmp_path / "missing.json")]
    result = CliRunner().invoke(app, ["sample", *args])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


@pytest.fixture
def tiny_lm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bytelevel_tokenizer: Tokenizer, bytelevel_vocab: Any,
            tiny_llama: Any) -> Any:
    """`tooldec run`'s model loader answering a tiny random Llama with a chat template (no download)."""
    transformers = pytest.importorskip("transformers")
    from tooldec.backends.loader import LoadedModel

    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer)
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    lm = LoadedModel(tiny_llama(bytelevel_vocab.size, seed=2), tokenizer, bytelevel_vocab, "tiny", "test", 0.0)
    monkeypatch.setattr("tooldec.backends.load_model", lambda *_a, **_k: lm)
    return lm


def test_run_answers_in_a_structure(tmp_path: Path, tiny_lm: Any) -> None:
    schema = {"type": "object", "properties": {"answer": {"enum": ["twelve", "other"]}, "sure": {"type": "boolean"}},
              "required": ["answer", "sure"], "additionalProperties": False}
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(schema))
    common = ["run", "What is 3 times 4?", "--no-prefix-cache", "--max-new-tokens", "24", "--json"]
    result = CliRunner().invoke(app, [*common, "--output-schema", str(path)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.splitlines()[-1])
    jsonschema.validate(out["value"], schema)
    assert json.loads(out["answer"]) == out["value"]
    result = CliRunner().invoke(app, [*common, "--output-regex", "(yes|no), [0-9]"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.splitlines()[-1])
    assert re.fullmatch("(yes|no), [0-9]", out["answer"]) and out["value"] == out["answer"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--output-regex", "(?<=a)b"], "--output-regex: terminal regex"),
        (["--output-schema", "missing.json"], "--output-schema: [Errno 2]"),
        (["--output-regex", "a", "--output-schema", "x.json"], "at most one of --output-schema and --output-regex"),
    ],
    ids=["lookaround", "no-file", "both"],
)
def test_run_refuses_a_bad_structure_before_loading(monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                    words: str) -> None:
    def no_model(*_a: object, **_k: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("tooldec.backends.load_model", no_model)
    result = CliRunner().invoke(app, ["run", "What is 3 times 4?", *args])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output
