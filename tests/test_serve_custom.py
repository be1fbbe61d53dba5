"""`tooldec serve` with OpenAI custom tools, through the real `openai` client: every custom call's input is a
sentence of the tool's Lark grammar (checked by `lark`, Earley) or a full match of its regex, returned in OpenAI's
custom-call shape, streamed or not; bad grammars are 400s naming the tool.

The tiny random Llama of test_serve.py: every call below is the guidance's doing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

torch = pytest.importorskip("torch")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
lark = pytest.importorskip("lark")

from conftest import ARITH_WS
from test_custom_tools import CODE, SQL, WEATHER, custom, grammar
from test_serve import MODEL, USER, Server, client_of, serving

from tooldec.backends.loader import LoadedModel

CALC = custom("calc", grammar("lark", ARITH_WS))
QUERY = custom("sql", grammar("lark", SQL))
REGEX = custom("code", grammar("regex", CODE))
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
ORACLES = {"calc": lark.Lark(ARITH_WS, parser="earley"), "sql": lark.Lark(SQL, parser="earley")}


@pytest.fixture(scope="module")
def lm(chatml_llama: Any) -> Iterator[LoadedModel]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: more threads only contend on a shared machine
    yield chatml_llama(4, 3.0, MODEL)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def server(lm: LoadedModel) -> Iterator[Server]:
    with serving(lm, 96) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return client_of(server)


def ask(client: Any, tools: list[dict[str, Any]], **kwargs: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=USER, tools=tools,
                                          max_tokens=kwargs.pop("max_tokens", 96), **kwargs)


def valid(call: Any) -> bool:
    """Whether a returned call is valid for its tool (raises where it is not)."""
    if call.type == "custom":
        name, text = call.custom.name, call.custom.input
        if name in ORACLES:
            ORACLES[name].parse(text)
        else:
            assert name == "code" and re.fullmatch(CODE, text), text
        return True
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    return True


@pytest.mark.parametrize("tool", [CALC, QUERY, REGEX], ids=["lark-arith", "lark-sql", "regex"])
def test_a_named_custom_tool_writes_sentences(client: Any, tool: dict[str, Any]) -> None:
    name = tool["custom"]["name"]
    made = []
    for seed in range(4):
        answer = ask(client, [tool, WEATHER_TOOL], tool_choice={"type": "custom", "custom": {"name": name}},
                     temperature=1.0, seed=seed).choices[0]
        if answer.finish_reason == "tool_calls":
            assert [c.type for c in answer.message.tool_calls] == ["custom"]
            assert answer.message.tool_calls[0].custom.name == name and valid(answer.message.tool_calls[0])
            made.append(answer.message.tool_calls[0].custom.input)
        else:
            assert answer.finish_reason == "length" and not answer.message.tool_calls
    assert made, "no call ended within max_tokens"


def test_mixed_tools_give_valid_calls_of_either_kind(client: Any) -> None:
    kinds = set()
    for seed in range(6):
        answer = ask(client, [CALC, REGEX, WEATHER_TOOL], tool_choice="required", temperature=1.0,
                     seed=seed, parallel_tool_calls=False).choices[0]
        for call in answer.message.tool_calls or []:
            assert valid(call)
            kinds.add(call.type)
    assert kinds == {"custom", "function"}, kinds


def test_a_streamed_custom_call_is_the_whole_one(client: Any) -> None:
    kwargs: dict[str, Any] = {"tool_choice": {"type": "custom", "custom": {"name": "code"}}, "temperature": 0.0}
    whole = ask(client, [REGEX], **kwargs).choices[0].message.tool_calls[0]
    pieces, heads = [], []
    for chunk in ask(client, [REGEX], stream=True, **kwargs):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                body = tc.model_extra["custom"]
                if tc.id is not None:
                    heads.append((tc.id, tc.type, body["name"]))
                pieces.append(body["input"])
    assert [h[1:] for h in heads] == [("custom", "code")] and "".join(pieces) == whole.custom.input


def test_a_past_custom_call_and_its_result_are_taken(client: Any) -> None:
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "custom", "custom": {"name": "calc", "input": "2+3"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=[CALC], max_tokens=24)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize(("tools", "param", "words"), [
    ([WEATHER_TOOL, custom("calc", grammar("lark", "start: missing\n"))], "tools[1].custom.format", "custom tool 'calc'"),
    ([custom("code", grammar("regex", "(?=a)a"))], "tools[0].custom.format", "lookaround"),
    ([custom("code", grammar("regex", "[a-"))], "tools[0].custom.format", "not a valid regular expression"),
    ([custom("code", grammar("gbnf", "root ::= [a]"))], "tools", "lark or regex"),
    ([custom("code", {"type": "grammar"})], "tools", "lark or regex"),
])
def test_bad_grammars_are_400s_naming_the_tool(client: Any, tools: list[dict[str, Any]], param: str,
                                                words: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, tools)
    error = info.value.body
    assert error["param"].startswith(param) and words in error["message"], error


def test_a_tool_choice_of_the_wrong_kind_is_a_400(client: Any) -> None:
    with pytest.raises(openai.BadRequestError, match="as a function tool"):
        ask(client, [CALC], tool_choice={"type": "function", "function": {"name": "calc"}})
    with pytest.raises(openai.BadRequestError, match="unknown tool"):
        ask(client, [CALC], tool_choice={"type": "custom", "custom": {"name": "nope"}})
