"""Schemas that were refused by size (issue 34) and the constructions that keep them small, checked against
`jsonschema` and Python's `re`: unanchored alternations share one `.*`, products of automata minimize their
operands (several `multipleOf` combined), `not: {multipleOf: <integer>}` is enforced on plain integers, and few
bounded integers under combinators are checked one by one."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton import compile as automaton_compile
from tooldec.automaton.compile import KeyLanguage, ProductCache, compile_dfa, compile_dfas
from tooldec.automaton.dfa import DFA
from tooldec.automaton.value_grammar import MAX_TERMINAL_STATES, NotTokenizable, value_grammar
from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Intersect, Node, lit, seq
from tooldec.grammar.regex import pattern_ir
from tooldec.grammar.schema import SchemaCompiler
from tooldec.grammar.strings import string_content


def _dfa(schema: Any) -> DFA:
    return compile_dfa(SchemaCompiler(schema, decide=KeyLanguage, additional_properties=True).value())


# -- unanchored alternations ------------------------------------------------------------------------------
WORDS = "TICK M1 M2 M3 M4 M5 M6 M10 M15 M20 M30 H1 H2 H4 D1 W1 MN1".split()  # noqa: SIM905
INTERVALS = "|".join(f"INTERVAL_{s}" for s in WORDS)


def test_an_unanchored_alternation_is_one_search_automaton() -> None:
    # Github_easy o5195: `.*a.*|.*b.*|...` told every set of matched branches apart (past 500,000 states)
    dfa = compile_dfa(pattern_ir(INTERVALS))
    assert dfa.num_states < 200
    for text, found in (("INTERVAL_M15", True), ("xINTERVAL_W1y", True), ("INTERVAL_M", False), ("", False)):
        assert dfa.accepts(text.encode()) == found


BRANCH = st.tuples(st.booleans(), st.text("ab", min_size=0, max_size=3), st.booleans()).map(
    lambda t: ("^" if t[0] else "") + t[1] + ("$" if t[2] else ""))


@settings(max_examples=150)
@given(st.lists(BRANCH, min_size=1, max_size=5),
       st.sampled_from(["{}", "({})", "^({})", "({})$", "x({})", "(?:{})b"]),
       st.lists(st.text("abx", max_size=6), min_size=10, max_size=20))
def test_alternations_search_as_python_does(branches: list[str], frame: str, texts: list[str]) -> None:
    pattern = frame.format("|".join(branches))
    try:
        rx = re.compile(pattern)
        dfa = compile_dfa(pattern_ir(pattern))
    except Exception:  # noqa: BLE001 - anchors inside a group the converter refuses, as before
        return
    for text in texts:
        assert dfa.accepts(json.dumps(text)[1:-1].encode()) == bool(rx.search(text)), (pattern, text)


# -- products of automata -----------------------------------------------------------------------------------
ALLANY2 = {  # Handwritten allany2: past 500,000 states before its products minimized their operands
    "type": "number",
    "allOf": [{"minimum": 1}, {"$ref": "#/definitions/any1"}, {"$ref": "#/definitions/any2"},
              {"$ref": "#/definitions/any3"}],
    "definitions": {
        "any1": {"anyOf": [{"multipleOf": 3}, {"multipleOf": 5}, {"multipleOf": 15}]},
        "any2": {"anyOf": [{"allOf": [{"not": {"multipleOf": 5}}, {"not": {"multipleOf": 3}}]},
                           {"multipleOf": 8}]},
        "any3": {"anyOf": [{"not": {"multipleOf": 8}}, {"multipleOf": 11}]},
    },
}


def _numbers(kind: str = "number") -> list[Any]:
    """Integers, halves, and (for `number`: `integer` is spelled in digits only) integral floats."""
    floats = [264.0, 2640.0, -6.0] if kind == "number" else []
    return [*range(-200, 201), *(x / 2 for x in range(-61, 61, 2)), *floats, 1320]


def _assert_exact(schema: Any, values: list[Any]) -> None:
    """The automaton accepts a value's JSON text exactly when `jsonschema` finds the value valid."""
    dfa = _dfa(schema)
    validator = jsonschema.validators.validator_for(schema)(schema)
    for v in values:
        assert dfa.accepts(json.dumps(v).encode()) == validator.is_valid(v), (schema, v)


def test_several_multiples_stay_small_and_exact() -> None:
    dfa = _dfa(ALLANY2)
    assert dfa.num_states < 20_000
    _assert_exact(ALLANY2, _numbers())


FACTORS = st.sampled_from([2, 3, 4, 5, 6, 7, 8, 11, 12, 15, 16, 24, 25])
LEAF = FACTORS.map(lambda m: {"multipleOf": m})


def _combined(kids: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    parts = st.lists(kids, min_size=2, max_size=3)
    return st.one_of(kids.map(lambda k: {"not": k}), parts.map(lambda ks: {"allOf": ks}),
                     parts.map(lambda ks: {"anyOf": ks}), parts.map(lambda ks: {"oneOf": ks}))


NUMBER_SCHEMAS = st.recursive(LEAF, _combined, max_leaves=6)


@settings(max_examples=25)
@given(st.sampled_from(["integer", "number"]), NUMBER_SCHEMAS, st.none() | st.integers(-150, 0),
       st.none() | st.integers(0, 150))
def test_combined_integer_multiples_are_exact(kind: str, body: dict, lo: int | None, hi: int | None) -> None:
    # `not` of an integer multipleOf is enforced on plain integers and integral decimals (`6.0`): with integer
    # factors and bounds every value below is spelled exactly, so the grammar is exact on them
    schema: dict[str, Any] = {"type": kind, "allOf": [body]}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    _assert_exact(schema, _numbers(kind))


@pytest.mark.parametrize("kind", ["integer", "number"])
def test_not_an_integer_multiple_keeps_the_other_integers(kind: str) -> None:
    schema = {"type": kind, "not": {"multipleOf": 3}}
    _assert_exact(schema, [*range(-20, 21), 1.5, *([4.0, 6.0] if kind == "number" else [])])
    dfa = _dfa(schema)
    # other spellings that may read as an integer are removed (a subset): exponents, near-integers
    assert not dfa.accepts(b"4e0")


@settings(max_examples=20)
@given(st.lists(st.sampled_from([2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37]), min_size=3, max_size=6, unique=True),
       st.integers(-1200, 0), st.integers(1, 1000), st.sampled_from([1, 3, 13.5]))
def test_few_bounded_integers_under_combinators_are_checked_one_by_one(
    primes: list[int], lo: int, width: int, step: float
) -> None:
    # a `not` of several multipleOfs multiplies their automata past the state bound (Handwritten num3); an
    # integer schema whose own bounds leave few values has each checked by jsonschema instead, exactly
    schema = {"type": "integer", "multipleOf": step, "not": {"anyOf": [{"multipleOf": p} for p in primes]},
              "exclusiveMinimum": lo, "exclusiveMaximum": lo + width}
    _assert_exact(schema, list(range(lo - 5, lo + width + 5)))


# -- rules the pushdown lexer cannot take ----------------------------------------------------------------
def test_a_token_past_the_lexer_bound_is_not_tokenizable_before_the_rule_is_walked() -> None:
    long_string = seq(lit('"'), string_content(max_length=9_000), lit('"'))
    assert compile_dfa(long_string).num_states > MAX_TERMINAL_STATES
    with pytest.raises(NotTokenizable, match="past the lexer"):
        value_grammar(seq(lit("["), long_string, lit("]")), [])


# -- the work of products ---------------------------------------------------------------------------------
def _products(n: int, width: int) -> Node:
    """`n` strings of 1 to `width` characters, each a different bounded pattern intersected with a length."""
    return seq(*(Intersect((string_content(max_length=width), pattern_ir(f"^[a-{chr(0x62 + i)}]*$")))
                 for i in range(n)))


def test_products_past_the_work_bound_are_refused_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The automata one root builds for its products count toward MAX_PRODUCT_WORK; each root of a compile has
    a bound of its own, and a product the cache holds costs nothing."""
    cache = ProductCache()
    monkeypatch.setattr(automaton_compile, "MAX_PRODUCT_WORK", 10**9)
    compile_dfa(_products(6, 40), cache)
    work = automaton_compile._work.set([0])
    try:
        compile_dfa(_products(1, 40))
        one = automaton_compile._work.get()[0]  # type: ignore[index]
    finally:
        automaton_compile._work.reset(work)
    monkeypatch.setattr(automaton_compile, "MAX_PRODUCT_WORK", 3 * one)
    assert compile_dfa(_products(2, 40)).num_states > 0
    with pytest.raises(UnsupportedSchemaError, match="products of automata") as info:
        compile_dfa(_products(6, 40))
    assert info.value.keyword == "size"
    assert len(compile_dfas([_products(2, 40), _products(2, 40)])) == 2
    assert compile_dfa(_products(6, 40), cache).num_states > 0
