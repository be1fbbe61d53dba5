"""Numbers: integer and decimal ranges accept exactly the values inside their bounds."""

from __future__ import annotations

import json
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import KeyLanguage, compile_dfa
from tooldec.grammar.numbers import any_number, integer_range, number_range

BOUND = st.one_of(st.none(), st.integers(-1200, 1200))


@settings(max_examples=120, deadline=None)
@given(BOUND, BOUND, st.lists(st.integers(-3000, 3000), min_size=5, max_size=30))
def test_integer_range_is_exact(lo: int | None, hi: int | None, values: list[int]) -> None:
    dfa = compile_dfa(integer_range(lo, hi))
    for v in values + [x for x in (lo, hi) if x is not None] + [0, -1, 1]:
        inside = (lo is None or v >= lo) and (hi is None or v <= hi)
        assert dfa.accepts(str(v).encode()) == inside, (lo, hi, v)
    assert not dfa.accepts(b"-0") and not dfa.accepts(b"01") and not dfa.accepts(b"")


NUMBERS = st.one_of(
    st.integers(-3000, 3000).map(str),
    st.floats(-3000, 3000, allow_nan=False).map(json.dumps),
    st.floats(-1e-3, 1e-3, allow_nan=False).map(json.dumps),
    st.floats(1e15, 1e20).map(json.dumps),
    st.sampled_from(["0.0", "5.000", "-0.5", "1e-05", "2.5e+16", "1E3", "0.10"]),
)


@settings(max_examples=150, deadline=None)
@given(BOUND, st.booleans(), BOUND, st.booleans(), st.lists(NUMBERS, min_size=5, max_size=30))
def test_number_range_is_sound(lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool, texts: list[str]) -> None:
    dfa = compile_dfa(number_range(lo, lo_incl, hi, hi_incl))
    for text in texts:
        if dfa.accepts(text.encode()):
            v = Decimal(text)
            assert lo is None or (v >= lo if lo_incl else v > lo), (lo, lo_incl, text)
            assert hi is None or (v <= hi if hi_incl else v < hi), (hi, hi_incl, text)


@settings(max_examples=150, deadline=None)
@given(BOUND, st.booleans(), BOUND, st.booleans(), st.lists(NUMBERS, min_size=5, max_size=30))
def test_number_range_is_complete_on_canonical_spellings(
    lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool, texts: list[str]
) -> None:
    dfa = compile_dfa(number_range(lo, lo_incl, hi, hi_incl))
    for text in texts:
        v = Decimal(text)
        inside = (lo is None or (v >= lo if lo_incl else v > lo)) and (hi is None or (v <= hi if hi_incl else v < hi))
        canonical = json.dumps(json.loads(text))
        if inside and not (canonical.startswith("-") and v == 0):
            assert dfa.accepts(canonical.encode()), (lo, lo_incl, hi, hi_incl, canonical)


def test_any_number_matches_json_numbers() -> None:
    dfa = compile_dfa(any_number())
    for good in ["0", "-0", "12", "-3.25", "1e5", "1E+5", "2.5e-3"]:
        assert dfa.accepts(good.encode())
    for bad in ["01", "+1", "1.", ".5", "1e", "--1", "NaN", "Infinity"]:
        assert not dfa.accepts(bad.encode())


# -- digit limits: a guided number always ends -------------------------------------------------------------

import numpy as np

from tooldec.automaton.dfa import DEAD, DFA
from tooldec.grammar.calls import JsonCall, ToolkenCall, tools_grammar
from tooldec.grammar.numbers import DigitLimits, digit_shape, limit_digits
from tooldec.specs import ToolSpec

LIMITS = st.builds(DigitLimits, st.integers(1, 6), st.integers(1, 6), st.integers(1, 3))


def _longest(dfa: DFA) -> int | None:
    """The longest accepted string's length, or None when the language is infinite (a live cycle)."""
    memo: dict[int, int] = {}
    on_path: set[int] = set()

    def walk(s: int) -> int | None:
        if s in memo:
            return memo[s]
        if s in on_path:
            return None
        on_path.add(s)
        best = 0 if dfa.accepting[s] else -1
        for t in np.unique(dfa.trans[s]):
            if t != DEAD:
                sub = walk(int(t))
                if sub is None:
                    return None
                best = max(best, sub + 1)
        on_path.discard(s)
        memo[s] = best
        return best

    return walk(dfa.start)


@settings(max_examples=40, deadline=None)
@given(LIMITS)
def test_digit_shape_is_finite_and_as_long_as_its_limits(limits: DigitLimits) -> None:
    dfa = compile_dfa(limit_digits(any_number(), limits))
    assert _longest(dfa) == 1 + limits.integer + 1 + limits.fraction + 2 + limits.exponent
    assert _longest(compile_dfa(digit_shape(limits))) == _longest(dfa)


@settings(max_examples=80, deadline=None)
@given(LIMITS, st.lists(st.from_regex(r"-?(0|[1-9][0-9]{0,7})(\.[0-9]{1,8})?([eE][+-]?[0-9]{1,4})?", fullmatch=True),
                        min_size=3, max_size=20))
def test_limit_digits_keeps_exactly_the_short_numbers(limits: DigitLimits, texts: list[str]) -> None:
    dfa = compile_dfa(limit_digits(any_number(), limits))
    for text in texts:
        mantissa, _, exponent = text.lstrip("-").replace("E", "e").partition("e")
        whole, _, fraction = mantissa.partition(".")
        short = (len(whole) <= limits.integer and len(fraction) <= limits.fraction
                 and len(exponent.lstrip("+-")) <= limits.exponent)
        assert dfa.accepts(text.encode()) == short, (limits, text)


def _number_tool(*schemas: dict) -> ToolSpec:
    props = {f"x{i}": s for i, s in enumerate(schemas)}
    return ToolSpec("divide", "", {"type": "object", "properties": props, "required": list(props)})


def test_a_guided_number_reaches_a_state_where_only_terminators_are_allowed() -> None:
    # the model of issue 13: `<divide>(48,172.700000…` until the token limit
    dfa = compile_dfa(tools_grammar([_number_tool({"type": "number"}, {"type": "number"})], ToolkenCall(), decide=KeyLanguage))
    state = dfa.step(dfa.start, b"<divide>(48,172.7")
    zeros = 0
    while dfa.step(state, b"0") != DEAD:
        state, zeros = dfa.step(state, b"0"), zeros + 1
    assert zeros == 7  # 8 fraction digits by default
    allowed = {b for b in range(256) if dfa.step(state, bytes([b])) != DEAD}
    assert allowed == set(b")eE")
    assert dfa.accepts(b"<divide>(48,172.70000000)=")
    # with integers and numbers only, every call ends: the language is finite
    assert _longest(dfa) is not None
    assert _longest(compile_dfa(tools_grammar([_number_tool({"type": "integer"})], JsonCall(), decide=KeyLanguage))) is not None
    # digits=None keeps the unbounded grammar
    assert _longest(compile_dfa(tools_grammar([_number_tool({"type": "number"})], ToolkenCall(digits=None), decide=KeyLanguage))) is None


BIG = st.one_of(st.integers(-10**25, 10**25), st.floats(-1e22, 1e22, allow_nan=False, allow_infinity=False),
                st.sampled_from([1e-10, -3.5e-12, 0.123456789012, 10**18, 2**63 - 1]))


@settings(max_examples=60, deadline=None)
@given(BIG, st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
       st.sampled_from(["integer", "number"]))
def test_limits_widen_to_keep_a_bounded_schema_satisfiable(bound: float, key: str, kind: str) -> None:
    schema = {"type": kind, key: bound}
    dfa = compile_dfa(tools_grammar([_number_tool(schema)], JsonCall(digits=DigitLimits(2, 1, 1)), decide=KeyLanguage))
    assert dfa.start != DEAD, schema
    if kind == "number" and key in ("minimum", "maximum"):  # the bound itself is a value
        bound = 0 if bound == 0 else bound  # spelt `0`: guided numbers never write `-0` (integer_range)
        text = json.dumps(bound) if abs(bound) < 1e16 else str(int(bound))
        exact = Decimal(text) == Decimal(repr(bound) if isinstance(bound, float) else bound)
        if exact and "e" not in text.lower():
            assert dfa.accepts(b'{"name": "divide", "arguments": {"x0": ' + text.encode() + b"}}"), text


def test_the_right_side_of_a_difference_stays_unbounded() -> None:
    # a 22-digit number is a number: `not number` must remove it even though guided numbers stop at 15 digits
    schema = {"enum": [1234567890123456789012, "a"], "not": {"type": "number"}}
    dfa = compile_dfa(tools_grammar([_number_tool(schema)], JsonCall(), decide=KeyLanguage))
    assert dfa.accepts(b'{"name": "divide", "arguments": {"x0": "a"}}')
    assert not dfa.accepts(b'{"name": "divide", "arguments": {"x0": 1234567890123456789012}}')
    assert DigitLimits().for_bounds([1e-10]).fraction == 11
