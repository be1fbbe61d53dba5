"""Custom tools (OpenAI's `{"type": "custom"}`): read from OpenAI tool lists, their calls guided by the tool's
grammar inside the call's JSON string (`tooldec.grammar.custom`), both ways exact.

Over a byte vocabulary (every text has one tokenisation): every random walk of the call grammar is a call whose
input `lark` (Earley) or `re.fullmatch` accepts, and every sentence of the raw grammar, escaped into a call, is
accepted by the call grammar.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import lark
import pytest
from conftest import ARITH_WS
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.compiler import Compiler
from tooldec.errors import GrammarError, ToolSpecError
from tooldec.grammar.calls import get_format, with_aliases
from tooldec.grammar.custom import ESCAPES
from tooldec.sample import random_walk
from tooldec.specs import ToolSet, from_openai_tools
from tooldec.vocab import Vocabulary

SQL = r"""
start: "SELECT " cols " FROM " NAME where?
cols: NAME ("," NAME)*
where: " WHERE " NAME "=" VALUE
NAME: /[a-z]{1,6}/
VALUE: /"[a-z\\\n]{0,6}"/ | /[0-9]{1,4}/
"""
"""SQL-ish, with quotes, backslashes and newlines inside values: what the JSON string must escape (short names
and values, so that a random model's calls end)."""
CODE = r"[0-9]{2,4}-[a-z]{1,5}"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}


def custom(name: str, fmt: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI custom tool entry."""
    return {"type": "custom", "custom": {"name": name, **({"format": fmt} if fmt is not None else {})}}


def grammar(syntax: str, definition: str) -> dict[str, Any]:
    """A grammar format as the openai client sends it."""
    return {"type": "grammar", "grammar": {"syntax": syntax, "definition": definition}}


TOOLS = [
    custom("calc", grammar("lark", ARITH_WS)),
    custom("sql", grammar("lark", SQL)),
    custom("code", grammar("regex", CODE)),
    custom("note"),
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
]
ORACLES = {"calc": lark.Lark(ARITH_WS, parser="earley"), "sql": lark.Lark(SQL, parser="earley")}


@pytest.fixture(scope="module")
def compiler() -> Compiler:
    """A compiler over single bytes (every text has one tokenisation)."""
    return Compiler(Vocabulary.from_bytes([bytes([b]) for b in range(256)] + [None], eos_id=256))


@pytest.fixture(scope="module")
def tools() -> ToolSet:
    return ToolSet(from_openai_tools(TOOLS))


@pytest.fixture(scope="module")
def calls(compiler: Compiler, tools: ToolSet) -> Any:
    return compiler.compile_custom_calls(tools, with_aliases(get_format("hermes"), tools))


def accepted(compiled: Any, text: str) -> Any:
    """The call `text` parses to when the guide takes it byte by byte and may end there, else None."""
    guide = compiled.guide()
    for b in text.encode():
        if not guide.accepts(b):
            return None
        guide.advance(b)
    return compiled.parse(guide.text()) if guide.is_accepting() else None


def written(name: str, arguments: Any, pair: tuple[str, str] = ("<tool_call>\n", "\n</tool_call>")) -> str:
    """A call as the model writes it (canonical JSON, `ensure_ascii=False`)."""
    return pair[0] + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + pair[1]


def test_openai_shapes_are_read(tools: ToolSet) -> None:
    assert [t.custom for t in tools] == [True, True, True, True, False]
    assert tools["calc"].to_openai() == {"type": "custom", "custom": {"name": "calc", "description": "",
                                                                      "format": grammar("lark", ARITH_WS)}}
    assert tools["note"].to_openai()["custom"]["format"] == {"type": "text"}
    flat = from_openai_tools([custom("c", {"type": "grammar", "syntax": "regex", "definition": "a+"})])[0]
    assert flat.input_format is not None and (flat.input_format.syntax, flat.input_format.definition) == ("regex", "a+")
    assert tools["calc"].text != ToolSet(from_openai_tools([custom("calc", grammar("lark", SQL))]))["calc"].text


@pytest.mark.parametrize(("entry", "words"), [
    (custom("c", grammar("gbnf", "root ::= [a]")), "grammar syntax must be lark or regex"),
    (custom("c", {"type": "json"}), "a custom tool format is"),
    (custom("c", grammar("lark", 3)), "definition must be a string"),  # type: ignore[arg-type]
    ({"type": "custom"}, "needs a 'custom' object"),
    (custom("bad name"), "tool name must match"),
])
def test_bad_custom_tools_are_refused_where_they_are(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(ToolSpecError, match=words) as info:
        from_openai_tools([entry])
    assert (info.value.path or "").startswith("#/0")


def test_every_kind_of_call_is_read_back(calls: Any) -> None:
    assert accepted(calls, written("calc", " 1 + (2*-3) ")).input == " 1 + (2*-3) "
    sql = 'SELECT a,b FROM t WHERE x="q\\\nz"'
    assert accepted(calls, written("sql", sql)).input == sql
    assert accepted(calls, written("code", "12-ab")).input == "12-ab"
    assert accepted(calls, written("note", 'any "text"\t\\ é\x01', ("", ""))).input == 'any "text"\t\\ é\x01'
    assert accepted(calls, written("note", "", ("```json\n", "\n```"))).input == ""
    call = accepted(calls, written("get_weather", {"city": "Paris"}))
    assert (call.name, call.arguments, call.input) == ("get_weather", {"city": "Paris"}, None)


@pytest.mark.parametrize("text", [
    written("calc", "1 +"), written("calc", "1 2"), written("code", "1-ab"), written("sql", "SELECT a FROM"),
    written("calc", "1") + "\n", written("get_weather", "Paris"), written("note", {"x": 1}),
    '<tool_call>\n{"name": "calc", "arguments": "1\\u0020+2"}\n</tool_call>',  # only the canonical escapes
    '<tool_call>\n{"name": "code", "arguments": "12-ab"}\n```',  # the closing of another pair
])
def test_what_is_not_a_valid_call_is_refused(calls: Any, text: str) -> None:
    assert accepted(calls, text) is None


def check(call: Any) -> None:
    """That a parsed call is valid for its tool."""
    if call.name in ORACLES:
        ORACLES[call.name].parse(call.input)
    elif call.name == "code":
        assert re.fullmatch(CODE, call.input)
    elif call.name == "note":
        assert isinstance(call.input, str)
    else:
        jsonschema.validate(call.arguments, WEATHER)


@settings(max_examples=60)
@given(st.integers(0, 2**32))
def test_random_walks_are_valid_calls(calls: Any, seed: int) -> None:
    guide = random_walk(calls.guide(), random.Random(seed), max_tokens=400, steer_after=80)
    check(calls.parse(guide.text()))


@settings(max_examples=40)
@given(st.integers(0, 2**32), st.sampled_from(["calc", "sql"]))
def test_every_sentence_escaped_is_a_call(compiler: Compiler, calls: Any, seed: int, name: str) -> None:
    raw = compiler.compile_grammar(ARITH_WS if name == "calc" else SQL)
    sentence = random_walk(raw.guide(), random.Random(seed), max_tokens=200, steer_after=40).text()
    assert accepted(calls, written(name, sentence)).input == sentence


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=12))
def test_free_text_is_any_text_escaped_canonically(calls: Any, text: str) -> None:
    assert accepted(calls, written("note", text)).input == text
    short = [c for c in text if len(ESCAPES.get(ord(c), b"")) == 2]  # `\n`, `\"`, ...: also `\u000A`, not canonical
    if short:  # the same text with one escape spelled otherwise is refused
        c = short[0]
        other = written("note", text).replace(ESCAPES[ord(c)].decode(), f"\\u{ord(c):04X}", 1)
        assert accepted(calls, other) is None


@pytest.mark.parametrize("syntax", ["mistral", "llama31", "python-calls"])
def test_formats_of_listed_calls_are_refused(compiler: Compiler, tools: ToolSet, syntax: str) -> None:
    with pytest.raises(GrammarError, match="JSON calls of their own"):
        compiler.compile_custom_calls(tools, syntax)


@pytest.mark.parametrize(("fmt", "words"), [
    (grammar("lark", "start: a\n"), "custom tool 'bad'"),
    (grammar("lark", 'start: "a" |\n%ignore'), "custom tool 'bad'"),
    (grammar("regex", "(?<=a)b"), "lookaround"),
    (grammar("regex", "(a"), "not a valid regular expression"),
])
def test_bad_grammars_are_refused_naming_the_tool(compiler: Compiler, fmt: dict[str, Any], words: str) -> None:
    tools = ToolSet(from_openai_tools([custom("bad", fmt)]))
    with pytest.raises(GrammarError, match=words) as info:
        compiler.compile_custom_calls(tools, "hermes")
    assert info.value.tool == "bad"


# --- the vLLM processor's payload (tooldec.integrations.batch): the same tools, the same one builder -----------

def test_a_vllm_payload_with_custom_tools_guides_their_calls(compiler: Compiler) -> None:
    from tooldec.integrations.batch import PolicyFactory, ToolRequest, check_compiles, tool_payload

    payload = tool_payload(TOOLS, tool_choice={"type": "custom", "custom": {"name": "sql"}})["tooldec"]
    check_compiles(payload, "hermes")
    policy = PolicyFactory(compiler, "hermes").policy(ToolRequest.from_payload(payload))
    for b in written("sql", "SELECT a FROM t").encode():
        policy.accept_token(b)
    assert [c.input for e in policy.events for c in e.calls] == ["SELECT a FROM t"]


@pytest.mark.parametrize(("tools", "syntax", "words"), [
    ([custom("c", grammar("lark", "start: nope\n"))], "hermes", "custom tool 'c'"),
    ([custom("c", grammar("regex", "(?=a)a"))], "hermes", "lookaround"),
    (TOOLS, "mistral", "JSON calls of their own"),
])
def test_a_vllm_payload_with_a_bad_custom_tool_is_refused_before_it_runs(tools: list[dict[str, Any]], syntax: str,
                                                                          words: str) -> None:
    from tooldec.integrations.batch import ToolRequestError, check_compiles, tool_payload

    with pytest.raises(ToolRequestError, match=words):
        check_compiles(tool_payload(tools)["tooldec"], syntax)
