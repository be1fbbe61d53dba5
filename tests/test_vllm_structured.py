"""A JSON Schema, a regex or a choice through tooldec's vLLM payload (`{"tooldec_json" | "tooldec_regex" |
"tooldec_choice": ...}`), without vLLM: the payload, its checks (what `validate_params` refuses with a ValueError,
so vLLM answers 400), and the persistent batch guiding such rows next to grammar and tool rows under random
logits. The vLLM tier is in test_vllm.py."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import pytest

torch = pytest.importorskip("torch")

from conftest import ARITH
from test_vllm import Params, Update, apply_update, masked, tooled

from tooldec.errors import ToolDecError
from tooldec.integrations.batch import (
    OutputRequest,
    PolicyBatch,
    PolicyFactory,
    ToolRequestError,
    grammar_payload,
    output_payload,
    read_request,
    tool_payload,
)
from tooldec.structured import Choice, JsonSchema, Regex, check_output
from tooldec.vocab import Vocabulary

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": False}
PATTERN = r"[0-9]{2,4}-[a-z]+"
OPTIONS = ["yes", "no", "not sure"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    """Every single byte, some pieces of answers, EOS last."""
    pieces = [bytes([b]) for b in range(256)] + [b'{"city": "', b'", "days": ', b"yes", b"not", b"12"]
    pieces = list(dict.fromkeys(pieces))
    return Vocabulary.from_bytes([*pieces, None], eos_id=len(pieces))


def test_payload_round_trip() -> None:
    assert output_payload("json", CITY) == {"tooldec_json": json.dumps(CITY)}
    assert output_payload("json", json.dumps(CITY)) == {"tooldec_json": json.dumps(CITY)}
    assert output_payload("regex", PATTERN) == {"tooldec_regex": PATTERN}
    assert output_payload("choice", tuple(OPTIONS)) == {"tooldec_choice": OPTIONS}
    assert read_request({**output_payload("json", CITY), "other": 1}) == OutputRequest("json", JsonSchema(CITY))
    assert read_request(output_payload("regex", PATTERN)) == OutputRequest("regex", Regex(PATTERN))
    assert read_request(output_payload("choice", OPTIONS)) == OutputRequest("choice", Choice(OPTIONS))
    with pytest.raises(ToolDecError, match="list of strings"):
        output_payload("choice", "yes")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tooldec_json": "{not json"}, "'tooldec_json': the schema is not valid JSON"),
        ({"tooldec_json": 3}, "'tooldec_json': structured_outputs.json must be a JSON Schema"),
        ({"tooldec_choice": "yes"}, "'tooldec_choice': a choice is a list of strings"),
        ({"tooldec_regex": ["a"]}, "'tooldec_regex': a regex is a string"),
        ({"tooldec_regex": "a", "tooldec_choice": ["a"]}, "not 'tooldec_regex' and 'tooldec_choice'"),
        ({"tooldec_regex": "a", **grammar_payload(ARITH)}, "not 'tooldec_regex' and 'tooldec_grammar'"),
        ({"tooldec_regex": "a", **tool_payload([{"name": "f"}])}, "not 'tooldec_regex' and 'tooldec'"),
    ],
    ids=["not-json", "not-a-schema", "choice-not-a-list", "regex-not-a-string", "two-outputs", "with-grammar",
         "with-tools"],
)
def test_bad_payloads_name_the_problem(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolRequestError, match=re.escape(message)) as err:
        read_request(extra)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("regex", "(?=a)a", "lookaround"),
        ("choice", [], "at least one option"),
        ("json", {"type": "integer", "minimum": 3, "maximum": 1}, "no value satisfies"),
        ("json", {"type": "array", "items": {"type": "object"}, "uniqueItems": True}, "uniqueItems"),
    ],
    ids=["lookaround", "no-option", "empty-schema", "unsupported-keyword"],
)
def test_check_output_refuses_what_cannot_be_guided(key: str, value: Any, message: str) -> None:
    request = read_request({f"tooldec_{key}": value})
    assert isinstance(request, OutputRequest)
    with pytest.raises(ToolDecError, match=message) as err:
        check_output(request.output)
    assert isinstance(err.value, ValueError)


def test_check_output_passes_what_can_be_guided() -> None:
    for key, value in (("json", CITY), ("regex", PATTERN), ("choice", OPTIONS)):
        request = read_request(output_payload(key, value))  # type: ignore[arg-type]
        assert isinstance(request, OutputRequest)
        check_output(request.output)


def test_an_output_row_is_masked_by_its_output_type(factory: PolicyFactory, vocab: Vocabulary) -> None:
    output: list[int] = []
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, Params(), [1], []), (1, Params(output_payload("choice", OPTIONS)), [1],
                                                                   output)]))
    mask = masked(batch, 2)
    assert mask[0].all()
    assert {vocab.token_bytes[t] for t in map(int, mask[1].nonzero()[0])} == {b"y", b"n", b"yes", b"not"}
    output += vocab.encode("not")
    assert {vocab.token_bytes[t] for t in map(int, masked(batch, 2)[1].nonzero()[0])} == {b" "}


def test_simulated_engine_writes_only_valid_outputs(factory: PolicyFactory, vocab: Vocabulary) -> None:
    """Schema, regex and choice rows next to tool rows in one batch under random logits: every output row that
    ends validates, and no row ends before its output is complete."""
    rng = random.Random(5)
    gen = torch.Generator().manual_seed(5)
    eos = min(vocab.eos_ids)
    checks = {
        "json": lambda t: jsonschema.validate(json.loads(t), CITY) is None,
        "regex": lambda t: re.fullmatch(PATTERN, t) is not None,
        "choice": lambda t: t in OPTIONS,
    }
    values = {"json": CITY, "regex": PATTERN, "choice": OPTIONS}
    kinds = [*checks, "tools"]
    rows: list[tuple[str, list[int]]] = [(kinds[i % 4], []) for i in range(12)]
    batch = PolicyBatch(factory)
    added = [(i, tooled("required") if kind == "tools" else Params(output_payload(kind, values[kind])), [1], out)
             for i, (kind, out) in enumerate(rows)]  # type: ignore[arg-type]
    apply_update(batch, Update(added=added))
    for _ in range(60):
        live = [i for i, (_, out) in enumerate(rows) if not out or out[-1] != eos]
        if not live:
            break
        logits = torch.randn((len(rows), vocab.size), generator=gen) * 3
        logits[:, eos] += rng.choice([0.0, 6.0])
        batch.apply(logits)
        for i in live:
            rows[i][1].append(int(torch.multinomial(torch.softmax(logits[i], dim=-1), 1, generator=gen)))
    ended = 0
    for kind, out in rows:
        if kind == "tools" or not out or out[-1] != eos:
            continue
        text = b"".join(vocab.token_bytes[t] or b"" for t in out[:-1]).decode()
        assert checks[kind](text), (kind, text)
        ended += 1
    assert ended >= 4
