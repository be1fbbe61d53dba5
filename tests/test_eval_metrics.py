"""Metrics: FuncQA answer parsing and tolerance, KAMEL, RestBench correct path, syntax errors, fuzzy names."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooldec.eval.metrics import (
    SyntaxChecker,
    accuracy,
    correct_path,
    extra_calls,
    funcqa_correct,
    fuzzy_call,
    kamel_correct,
    nearest_name,
    normalize_step,
    parse_number,
    syntax_error_rates,
    tokens_per_tool,
)
from tooldec.grammar.calls import ParsedCall
from tooldec.specs import ToolSpec
from tooldec.specs.normalize import closed_objects
from tooldec.toolsets import funcqa_tools


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("In 11 years it grows 1.04^11=1.54 times. So, the answer is 1.54.", 1.54),
        ("So, the answer is 777.41 dollars left of 800.", 777.41),
        ("The cost is 50*3.2=160. #### 160", 160.0),
        ("#### 0.03125\n", 0.03125),
        ("the answer is 32,333 apples", 32333.0),
        ("the answer is -4.5", -4.5),
        ("the answer is 1.2e3", 1200.0),
        ("no marker: 3 then 4 and finally 5.5", 5.5),
        ("the answer is unclear, maybe 7", 7.0),
        ("nothing numeric here", None),
        ("values 1, 2, 3", 3.0),
    ],
)
def test_parse_number(text: str, number: float | None) -> None:
    assert parse_number(text) == number


def test_funcqa_tolerance_is_relative_to_the_gold_answer() -> None:
    assert funcqa_correct(1000.9, 1000)
    assert funcqa_correct(999.0, 1000)
    assert not funcqa_correct(1001.1, 1000)
    assert funcqa_correct("So, the answer is 0.3936.", 0.39365)
    assert not funcqa_correct("I don't know", 1.0)
    assert funcqa_correct(0.0, 0.0)
    assert not funcqa_correct(1e-9, 0.0)


_gold = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False).filter(lambda x: abs(x) > 1e-6)


@given(_gold, st.floats(min_value=0, max_value=0.00099))
def test_funcqa_accepts_within_tolerance_both_sides(gold: float, rel: float) -> None:
    assert funcqa_correct(gold * (1 + rel), gold)
    assert funcqa_correct(gold * (1 - rel), gold)


@given(_gold, st.floats(min_value=0.0011, max_value=10))
def test_funcqa_rejects_beyond_tolerance_both_sides(gold: float, rel: float) -> None:
    assert not funcqa_correct(gold * (1 + rel), gold)
    assert not funcqa_correct(gold * (1 - rel), gold)


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_parse_number_reads_back_a_formatted_answer(value: float) -> None:
    text = f"So, the answer is {value:.4f}."
    assert math.isclose(parse_number(text), float(f"{value:.4f}"))


def test_kamel_and_accuracy() -> None:
    assert kamel_correct("P17", "P17")
    assert not kamel_correct(None, "P17")
    assert accuracy([True, False, True, True]) == 0.75
    assert accuracy([]) == 0.0


def test_correct_path_is_an_ordered_subsequence() -> None:
    gold = ["GET /search/person", "GET /person/{person_id}/movie_credits"]
    assert correct_path(gold, gold)
    assert correct_path(
        ["GET /search/person", "GET /movie/{movie_id}", "GET /person/{id}/movie_credits/"], gold
    )
    assert not correct_path(["GET /person/{person_id}/movie_credits", "GET /search/person"], gold)
    assert not correct_path(["GET /search/person"], gold)
    assert not correct_path(["POST /search/person", "GET /person/{x}/movie_credits"], gold)
    assert correct_path(["get /a"], [" GET /a "])
    assert extra_calls(["a", "b", "c"], ["a"]) == 2


def test_normalize_step() -> None:
    assert normalize_step(" get  /person/{person_id}/movie_credits/ ") == "GET /person/{}/movie_credits"
    assert normalize_step("GET /") == "GET /"


@given(st.lists(st.sampled_from(["GET /a", "GET /b", "POST /c"]), max_size=5), st.data())
def test_every_subsequence_is_a_correct_path(predicted: list[str], data: st.DataObject) -> None:
    keep = data.draw(st.lists(st.booleans(), min_size=len(predicted), max_size=len(predicted)))
    gold = [step for step, k in zip(predicted, keep, strict=True) if k]
    assert correct_path(predicted, gold)


WEATHER = ToolSpec(
    "get_weather",
    "Weather of a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1},
            "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
        },
        "required": ["city"],
    },
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', None),
        ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', None),
        ('{"name": "get_weather", "arguments": {"city": "Paris"', "format"),
        ("get_weather(city='Paris')", "format"),
        ('{"name": "get_wether", "arguments": {"city": "Paris"}}', "name"),
        ('{"name": 3, "arguments": {}}', "name"),
        ('{"name": "get_weather", "arguments": {}}', "argument"),
        ('{"name": "get_weather", "arguments": {"city": 3}}', "argument"),
        ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 0}}', "argument"),
        ('{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}', "argument"),
        ('{"name": "get_weather", "arguments": {"city": "Paris", "where": {"lat": 1, "x": 2}}}', "argument"),
        ('{"name": "get_weather", "arguments": ["Paris"]}', "argument"),
    ],
)
def test_syntax_error_classes(text: str, kind: str | None) -> None:
    assert SyntaxChecker([WEATHER], "json").classify(text).kind == kind


def test_syntax_checker_in_python_format_and_parsed_calls() -> None:
    checker = SyntaxChecker([WEATHER], "python")
    assert checker.classify('get_weather(city="Paris")').kind is None
    assert checker.classify('get_weather(city="Paris"').kind == "format"
    assert checker.check(("weather", {"city": "x"})).kind == "name"
    assert checker.check(ParsedCall("get_weather", {"city": "x"})).kind is None


def test_syntax_checker_binds_positional_arguments() -> None:
    checker = SyntaxChecker(funcqa_tools(), "json")
    assert checker.check(ParsedCall("add", {}, (1, 2))).kind is None
    assert checker.check(ParsedCall("sqrt", {}, (1, 2))).kind == "argument"
    assert checker.check(ParsedCall("sqrt", {}, ("x",))).kind == "argument"


def test_syntax_error_rates() -> None:
    rates = syntax_error_rates([None, "format", "name", "name"])
    assert rates == {"format": 0.25, "name": 0.5, "argument": 0.0, "any": 0.75}
    assert syntax_error_rates([])["any"] == 0.0


def test_nearest_name_and_fuzzy_call() -> None:
    names = ["multiply", "divide", "power"]
    assert nearest_name("multiply", names) == "multiply"
    assert nearest_name("multiplication", names) == "multiply"
    assert nearest_name("div", names) == "divide"
    call = fuzzy_call(ParsedCall("pow", {}, (2, 3)), funcqa_tools())
    assert call == ParsedCall("power", {}, (2, 3))
    with pytest.raises(ValueError):
        nearest_name("x", [])


@given(
    st.lists(st.text("abcdef", min_size=1, max_size=6), min_size=1, max_size=6, unique=True),
    st.text("abcdef"),
)
def test_nearest_name_is_always_an_existing_name(names: list[str], name: str) -> None:
    assert nearest_name(name, names) in names


def test_tokens_per_tool() -> None:
    assert tokens_per_tool("a b c d", 2, str.split) == 2.0
    with pytest.raises(ValueError):
        tokens_per_tool("a", 0, str.split)


def test_closed_objects_declare_required_keys_the_grammar_admits(bytelevel_vocab) -> None:
    """An object that lists required keys without properties (BFCL's `waste_calculation.calculate`): the grammar
    admits the keys with any value, and the checker accepts every call the grammar generates (random byte walks
    through its automaton), where closing with `additionalProperties: false` alone rejected them all."""
    import random

    from tooldec.compiler import Compiler
    from tooldec.grammar.calls import get_format

    params = {
        "type": "object",
        "properties": {
            "population": {"type": "object", "required": ["adults", "children"]},
            "location": {"type": "string"},
        },
        "required": ["population", "location"],
    }
    tool = ToolSpec("waste", "", params)
    closed = closed_objects(params)
    assert closed["properties"]["population"]["properties"] == {"adults": {}, "children": {}}
    assert closed["properties"]["population"]["additionalProperties"] is False
    dfa = Compiler(bytelevel_vocab).compile([tool], "json", use_cache=False).dfa
    checker, parse, rng = SyntaxChecker([tool], "json"), get_format("json").parse, random.Random(0)
    for _ in range(60):
        state, text = dfa.start, bytearray()
        while True:
            choices = [b for b in range(256) if dfa.trans[state, dfa.classes[b]]]
            if dfa.accepting[state] and (not choices or len(text) > 400 or rng.random() < 0.3):
                break
            choices = [b for b in choices if b < 0x80] or choices  # keep the walks readable where it can
            byte = rng.choice(choices)
            text.append(byte)
            state = int(dfa.trans[state, dfa.classes[byte]])
        call = parse(text.decode())
        assert set(call.arguments["population"]) >= {"adults", "children"}
        assert checker.check(call).kind is None, text.decode()
