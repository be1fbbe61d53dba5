"""Numbers: integer and decimal ranges accept exactly the values inside their bounds."""

from __future__ import annotations

import json
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import compile_dfa
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
