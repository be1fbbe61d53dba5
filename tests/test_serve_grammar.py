"""`tooldec serve` with vLLM's `structured_outputs` (grammar, regex, choice, json), through the real `openai` client
(`extra_body`).

The tiny random Llama of test_serve.py, with EOS boosted so that answers end: every sentence below is the
guidance's doing, and `lark` (an independent parser) must accept each one that ended with "stop".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

torch = pytest.importorskip("torch")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
lark = pytest.importorskip("lark")

from conftest import ARITH_WS
from test_serve import MODEL, USER, Server, client_of, serving

from tooldec.backends.loader import LoadedModel
from tooldec.grammar.cfg import sniff_syntax

LIST_GBNF = r"""
root ::= "[" item ("," item)* "]"
item ::= [0-9]+ | "\"" [a-z]* "\""
"""
"""A list of numbers and lower-case strings, in GBNF."""

LIST_LARK = r"""
start: "[" item ("," item)* "]"
item: /[0-9]+/ | /"[a-z]*"/
"""
"""LIST_GBNF in Lark: the oracle its answers are checked with."""


@pytest.fixture(scope="module")
def lm(chatml_llama: Any) -> Iterator[LoadedModel]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: more threads only contend on a shared machine
    yield chatml_llama(2, 3.0, MODEL)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def server(lm: LoadedModel) -> Iterator[Server]:
    with serving(lm, 64) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return client_of(server)


def ask(client: Any, grammar: str, **kwargs: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=USER, max_tokens=kwargs.pop("max_tokens", 64),
                                          extra_body={"structured_outputs": {"grammar": grammar}}, **kwargs)


def streamed(client: Any, grammar: str, **kwargs: Any) -> tuple[str, str | None]:
    """The content and finish_reason of a streamed answer."""
    content, finish = "", None
    for chunk in ask(client, grammar, stream=True, **kwargs):
        for c in chunk.choices:
            content += c.delta.content or ""
            finish = c.finish_reason or finish
    return content, finish


def test_the_syntax_is_read_from_the_text() -> None:
    assert sniff_syntax(LIST_GBNF) == "gbnf" and sniff_syntax(ARITH_WS) == "lark"
    assert sniff_syntax('start: "a ::= b"') == "lark"
    assert sniff_syntax("json-value ::= [0-9]") == "gbnf"


@pytest.mark.parametrize(("grammar", "oracle"), [(ARITH_WS, ARITH_WS), (LIST_GBNF, LIST_LARK)], ids=["lark", "gbnf"])
def test_sampled_answers_are_sentences_of_the_grammar(client: Any, grammar: str, oracle: str) -> None:
    parser = lark.Lark(oracle, parser="earley")
    ended = []
    for seed in range(6):
        answer = ask(client, grammar, temperature=1.0, seed=seed).choices[0]
        assert not answer.message.tool_calls and answer.finish_reason in ("stop", "length")
        if answer.finish_reason == "stop":
            parser.parse(answer.message.content)
            ended.append(answer.message.content)
    assert len(ended) >= 3 and max(map(len, ended)) > 4, ended  # not only the shortest sentences


@pytest.mark.parametrize("grammar", [ARITH_WS, LIST_GBNF], ids=["lark", "gbnf"])
def test_streamed_and_whole_answers_agree(client: Any, grammar: str) -> None:
    for seed in range(2):
        whole = ask(client, grammar, temperature=1.0, seed=seed).choices[0]
        content, finish = streamed(client, grammar, temperature=1.0, seed=seed)
        assert (content, finish) == (whole.message.content, whole.finish_reason)


def test_a_cut_answer_is_a_prefix_and_says_length(client: Any) -> None:
    answer = ask(client, LIST_GBNF, temperature=1.0, seed=0, max_tokens=1).choices[0]
    assert answer.finish_reason == "length" and answer.message.content.startswith("[")


def test_a_bad_grammar_is_a_400_naming_its_line_and_column(client: Any, server: Server) -> None:
    for grammar, where in [("start: expr\nexpr: \"a\" (\n", "line 2"), ('root ::= "a"\nitem ::= [0-9\n', "line 2"),
                           ("start: missing\n", "line 1")]:
        resp = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": USER, "structured_outputs": {"grammar": grammar}})
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["param"] == "structured_outputs.grammar" and error["code"] == "invalid_grammar", error
        assert where in error["message"] and "column" in error["message"], error
    with pytest.raises(openai.BadRequestError, match="line 1"):
        ask(client, "start: missing\n")
    assert ask(client, ARITH_WS, temperature=0).choices[0].finish_reason in ("stop", "length")  # still serving


@pytest.mark.parametrize(
    ("outputs", "extra", "param", "words"),
    [
        ({"grammar": ARITH_WS}, {"tools": [{"type": "function", "function": {"name": "f"}}]},
         "structured_outputs.grammar", "callable tools"),
        ({"grammar": ARITH_WS}, {"response_format": {"type": "json_object"}}, "structured_outputs.grammar",
         "response_format"),
        ({"regex": "(?<=a)b"}, {}, "structured_outputs.regex", "lookaround"),
        ({"grammar": ARITH_WS, "choice": ["a", "b"]}, {}, "structured_outputs.choice", "one of grammar, regex"),
        ({"choice": []}, {}, "structured_outputs.choice", "at least one option"),
        ({"structural_tag": "x"}, {}, "structured_outputs.structural_tag", "not supported"),
        ({}, {}, "structured_outputs", "needs one of json, regex"),
        ({"json": {"type": "integer", "minimum": 5, "maximum": 1}}, {}, "structured_outputs.json", "no value"),
        ({"json": {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True,
                   "items": {"type": "object"}}}}}, {}, "structured_outputs.json.properties.x.uniqueItems", "uniqueItems"),
        ({"json": "{not json"}, {}, "structured_outputs.json", "not valid JSON"),
        ({"json": {"type": "object"}, "regex": "a"}, {}, "structured_outputs.json", "one of grammar"),
        ({"grammar": 3}, {}, "structured_outputs.grammar", "valid string"),
    ],
    ids=["tools", "response_format", "bad-regex", "two-keys", "no-choice", "unknown-key", "empty", "empty-schema",
         "unsupported-keyword", "schema-not-json", "json-and-regex", "not-a-string"],
)
def test_structured_outputs_it_cannot_honour_are_a_400(server: Server, outputs: dict[str, Any],
                                                       extra: dict[str, Any], param: str, words: str) -> None:
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": USER, "structured_outputs": outputs, **extra})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_a_grammar_with_tools_that_may_not_be_called(client: Any) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    answer = ask(client, ARITH_WS, tools=tools, tool_choice="none", temperature=0).choices[0]
    assert not answer.message.tool_calls
    if answer.finish_reason == "stop":
        lark.Lark(ARITH_WS, parser="earley").parse(answer.message.content)


def test_a_regex_or_a_choice_guides_the_whole_answer(client: Any) -> None:
    import re

    for seed in range(3):
        for outputs, ok in (({"regex": r"[0-9]{2,4}-[a-z]+"}, lambda t: re.fullmatch(r"[0-9]{2,4}-[a-z]+", t)),
                            ({"choice": ["yes", "no", "not sure"]}, lambda t: t in ("yes", "no", "not sure"))):
            answer = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=64, temperature=1.0,
                                                    seed=seed, extra_body={"structured_outputs": outputs})
            choice = answer.choices[0]
            if choice.finish_reason == "stop":
                assert ok(choice.message.content), (outputs, choice.message.content)


CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city", "days"], "additionalProperties": False}


@pytest.mark.parametrize("schema", [CITY, json.dumps(CITY)], ids=["object", "json-text"])
def test_a_json_schema_guides_the_whole_answer(client: Any, schema: Any) -> None:
    ended = 0
    for seed in range(4):
        answer = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=64, temperature=1.0,
                                                seed=seed, extra_body={"structured_outputs": {"json": schema}})
        choice = answer.choices[0]
        assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), CITY)
            ended += 1
    assert ended, "no answer ended"
    whole = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=64, temperature=1.0, seed=1,
                                           extra_body={"structured_outputs": {"json": schema}}).choices[0]
    content, finish = "", None
    for chunk in client.chat.completions.create(model=MODEL, messages=USER, max_tokens=64, temperature=1.0, seed=1,
                                                stream=True, extra_body={"structured_outputs": {"json": schema}}):
        for c in chunk.choices:
            content += c.delta.content or ""
            finish = c.finish_reason or finish
    assert (content, finish) == (whole.message.content, whole.finish_reason)


TREE = {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                         "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
        "required": ["v", "kids"], "additionalProperties": False}


def test_a_recursive_response_format_guides_the_whole_answer(client: Any) -> None:
    """A recursive schema (a tree whose kids are trees) through response_format: the pushdown guide; every answer
    that ends validates, and one cut by max_tokens is the start of a valid tree."""
    response_format = {"type": "json_schema", "json_schema": {"name": "tree", "schema": TREE, "strict": True}}
    ended = 0
    for seed in range(6):
        choice = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=96, temperature=1.0,
                                                seed=seed, response_format=response_format).choices[0]
        assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), TREE)
            ended += 1
        else:
            assert choice.message.content.startswith('{"v": ')
    assert ended, "no answer ended"
