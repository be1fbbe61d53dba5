"""The context-free guide's bindings (`_core.CfgGrammar`, `_core.CfgMatcher`) take any Python value without
crashing: malformed terminal tables, rules and symbols out of range, empty lists and junk raise a Python exception;
any tokens, bytes, rollbacks and bitmask rows given to a matcher are refused or taken, never a crash. Run under
AddressSanitizer and UBSan by tests/sanitize/run.sh."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_core_fuzz import EXPECTED, FUZZ, INTS, JUNK, TOKENS, VOCAB, _calls_fail_cleanly, _mutated

from tooldec import _core
from tooldec.automaton.compile import compile_dfas
from tooldec.grammar.cfg import load_grammar

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

GRAMMAR = load_grammar('start: "{" item* "}"\nitem: "a" | "b" | "ab" | "x"\n%ignore " "\n', "lark")
DFAS = [(np.ascontiguousarray(d.trans, dtype=np.int32), d.classes.copy(), d.accepting.copy(), int(d.start))
        for d in compile_dfas([t.node for t in GRAMMAR.terminals])]
RULES = (np.array([r.lhs for r in GRAMMAR.rules], np.int32),
         np.cumsum([0] + [len(r.rhs) for r in GRAMMAR.rules]).astype(np.int64),
         np.array([s for r in GRAMMAR.rules for s in r.rhs], np.int32))


def _args() -> list[Any]:
    """CfgGrammar's arguments for GRAMMAR over the fuzz vocabulary, valid."""
    n = len(DFAS)
    return [VOCAB, list(DFAS), np.zeros(n, np.int32), np.zeros(n, bool), np.array(GRAMMAR.ignore, np.int32),
            len(GRAMMAR.nonterminals), *RULES, GRAMMAR.start]


GOOD = _core.CfgGrammar(*_args())


@FUZZ
@given(st.data())
def test_grammar_refuses_malformed_tables(data: st.DataObject) -> None:
    args = _args()
    at = data.draw(st.integers(0, len(args) - 1))
    if at == 1:  # one terminal's table, or the list itself
        terms = list(args[1])
        if data.draw(st.booleans()) and terms:
            k = data.draw(st.integers(0, len(terms) - 1))
            parts = list(terms[k])
            j = data.draw(st.integers(0, 3))
            parts[j] = data.draw(INTS) if j == 3 else _mutated(parts[j], data)
            terms[k] = tuple(parts)
        else:
            terms = data.draw(st.one_of(st.just([]), JUNK))
        args[1] = terms
    elif at in (0,):
        args[0] = data.draw(st.one_of(st.none(), JUNK))
    elif at in (5, 9):
        args[at] = data.draw(INTS)
    else:
        args[at] = _mutated(args[at], data)
    max_items = data.draw(st.one_of(st.just(1000), INTS))
    _calls_fail_cleanly(lambda: _core.CfgMatcher(_core.CfgGrammar(*args, max_items=max_items)).accept_bytes(b"{ab}"))


@FUZZ
@given(st.binary(max_size=100), st.integers(0, len(DFAS) - 1))
def test_grammar_takes_any_chain_of_byte_sets(rows: bytes, k: int) -> None:
    args = _args()
    args[1] = [rows if i == k else d for i, d in enumerate(DFAS)]  # a terminal as rows of 32 bytes, or not
    _calls_fail_cleanly(lambda: _core.CfgMatcher(_core.CfgGrammar(*args)).accept_bytes(b"{ab}"))
    _calls_fail_cleanly(lambda: _core.chain_dfa(rows))


@FUZZ
@given(st.lists(st.one_of(st.tuples(st.just("token"), INTS), st.tuples(st.just("bytes"), st.binary(max_size=12)),
                          st.tuples(st.just("rollback"), INTS), st.tuples(st.just("fill"), INTS),
                          st.tuples(st.just("steer"), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)),
                          st.tuples(st.just("misc"), INTS)),
                max_size=25))
def test_matcher_takes_any_sequence_of_calls(calls: list[tuple[str, Any]]) -> None:
    m = _core.CfgMatcher(GOOD)
    words = (VOCAB.size + 31) // 32
    out = np.zeros((2, words), np.int32)
    for verb, arg in calls:
        try:
            if verb == "token":
                m.accept_token(arg)
                m.accepts(arg)
                m.runs_on(arg)
            elif verb == "bytes":
                m.accept_bytes(arg)
            elif verb == "rollback":
                m.rollback(arg)
            elif verb == "fill":
                m.fill(out, arg)
            elif verb == "steer":
                m.steer(np.array(arg, dtype=np.int32))
            else:
                m.forced_bytes(arg)
                m.distance()
                m.is_finished()
                m.can_end()
        except EXPECTED:
            pass
    _calls_fail_cleanly(lambda: m.fill(np.zeros((1, words + 1), np.int32), 0))
    _calls_fail_cleanly(lambda: m.fill(np.zeros((words,), np.int32), 0))
    _calls_fail_cleanly(lambda: m.fill_at(0))
    _calls_fail_cleanly(lambda: _core.fill_bitmasks(out, [m, m, None], np.array([0, 1, 1], np.int32), 2))


def test_a_matcher_still_guides_after_refused_calls() -> None:
    m = _core.CfgMatcher(GOOD)
    for bad in (-1, 2**31 - 1, VOCAB.size):
        assert not m.accept_token(bad)
    with pytest.raises(IndexError):
        m.rollback(1)
    assert m.accept_bytes(b"{ a  b ab}") == 10 and m.can_end()
    assert m.accept_token(TOKENS.index(b"{")) is False  # after the closing brace only EOS
