"""The automaton: IR → NFA → DFA agrees with Python's `re` on random expressions; products; pruning."""

from __future__ import annotations

import itertools
import re
import signal
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.compile import compile_dfa
from tooldec.automaton.dfa import DEAD, DFA, minimize, separated_run, union_dfas
from tooldec.grammar.ir import (
    NOTHING,
    Difference,
    Fields,
    Intersect,
    Node,
    Repeat,
    alt,
    lit,
    one_of_bytes,
    seq,
)

ALPHABET = "abc"
WORDS = ["".join(p) for n in range(6) for p in itertools.product(ALPHABET, repeat=n)]


def _leaf() -> st.SearchStrategy[tuple[Node, str]]:
    single = st.sampled_from(ALPHABET).map(lambda c: (lit(c), re.escape(c)))
    sets = st.sets(st.sampled_from(ALPHABET), min_size=1).map(
        lambda s: (one_of_bytes("".join(sorted(s))), "[" + "".join(sorted(s)) + "]")
    )
    return st.one_of(single, sets)


def _extend(children: st.SearchStrategy[tuple[Node, str]]) -> st.SearchStrategy[tuple[Node, str]]:
    def seq_of(parts: list[tuple[Node, str]]) -> tuple[Node, str]:
        return seq(*(p[0] for p in parts)), "".join(f"(?:{p[1]})" for p in parts)

    def alt_of(parts: list[tuple[Node, str]]) -> tuple[Node, str]:
        return alt(*(p[0] for p in parts)), "|".join(f"(?:{p[1]})" for p in parts)

    def rep(args: tuple[tuple[Node, str], int, int | None, bool]) -> tuple[Node, str]:
        (node, rx), lo, extra, with_sep = args
        hi = None if extra is None else lo + extra
        if not with_sep:
            return Repeat(node, lo, hi), f"(?:{rx}){{{lo},{'' if hi is None else hi}}}"
        sep_rx = ","
        more = f"(?:{sep_rx}(?:{rx})){{{max(lo - 1, 0)},{'' if hi is None else hi - 1}}}"
        body = f"(?:{rx}){more}"
        full = f"(?:{body})?" if lo == 0 else body
        if hi == 0:
            full = ""
        return Repeat(node, lo, hi, lit(",")), full

    return st.one_of(
        st.lists(children, min_size=1, max_size=3).map(seq_of),
        st.lists(children, min_size=1, max_size=3).map(alt_of),
        st.tuples(children, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2)), st.booleans()).map(rep),
    )


EXPRESSIONS = st.recursive(_leaf(), _extend, max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(EXPRESSIONS)
def test_dfa_agrees_with_re(expr: tuple[Node, str]) -> None:
    node, rx = expr
    dfa = compile_dfa(node)
    pat = re.compile(rx)
    for w in WORDS + ["a,a", "a,b,c", ",", "a,", "ab,c,a"]:
        assert dfa.accepts(w.encode()) == bool(pat.fullmatch(w)), (rx, w)


@settings(max_examples=80, deadline=None)
@given(EXPRESSIONS, EXPRESSIONS)
def test_products_agree_with_re(a: tuple[Node, str], b: tuple[Node, str]) -> None:
    inter = compile_dfa(Intersect((a[0], b[0])))
    diff = compile_dfa(Difference(a[0], b[0]))
    pa, pb = re.compile(a[1]), re.compile(b[1])
    for w in WORDS:
        ina, inb = bool(pa.fullmatch(w)), bool(pb.fullmatch(w))
        assert inter.accepts(w.encode()) == (ina and inb)
        assert diff.accepts(w.encode()) == (ina and not inb)


@settings(max_examples=80, deadline=None)
@given(st.lists(EXPRESSIONS, min_size=2, max_size=4), st.booleans())
def test_unions_agree_with_re(exprs: list[tuple[Node, str]], empty_first: bool) -> None:
    """The core union accepts what any part accepts, also when its first part is itself a union (adding a tool to
    a cached set: the first automaton keeps its state numbers) or an empty language; every state it reaches can
    still finish (its first part's states on the shared prefix stay, unreachable, but live)."""
    dfas = [compile_dfa(node) for node, _ in exprs]
    if empty_first:
        dfas.insert(0, compile_dfa(NOTHING))
    pats = [re.compile(rx) for _, rx in exprs]
    grown = union_dfas([union_dfas(dfas[:-1]) if len(dfas) > 2 else dfas[0], dfas[-1]])
    for union in (union_dfas(dfas), grown):
        for w in WORDS + ["a,a", "a,b,c", ","]:
            assert union.accepts(w.encode()) == any(p.fullmatch(w) for p in pats), w
        assert union.start != DEAD or not any(p.fullmatch(w) for p in pats for w in WORDS)
        assert _all_can_finish(union)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=5))
def test_fields_emit_every_ordered_subset_holding_the_required(required: list[bool]) -> None:
    names = "abcde"[: len(required)]
    dfa = compile_dfa(Fields(tuple((lit(n), r) for n, r in zip(names, required)), lit(",")))
    must = {n for n, r in zip(names, required) if r}
    for k in range(len(names) + 1):
        for subset in itertools.combinations(names, k):
            ok = must <= set(subset)
            assert dfa.accepts(",".join(subset).encode()) == ok
            if len(subset) > 1:
                assert not dfa.accepts("".join(subset).encode())
                assert not dfa.accepts(",".join(reversed(subset)).encode())


@settings(max_examples=60, deadline=None)
@given(EXPRESSIONS)
def test_every_live_state_can_finish(expr: tuple[Node, str]) -> None:
    dfa = compile_dfa(expr[0])
    if dfa.start == DEAD:
        return
    # from every state, some accepting state is reachable (pruning), and the dead state is absorbing
    assert _all_can_finish(dfa)


def _all_can_finish(dfa: DFA) -> bool:
    """The dead state is absorbing and some accepting state is reachable from every other state."""
    if dfa.trans[DEAD].any():
        return False
    reach = dfa.accepting.copy()
    changed = True
    while changed:
        nxt = reach | np.array([reach[row].any() for row in dfa.trans])
        changed = bool((nxt != reach).any())
        reach = nxt
    return bool(reach[1:].all())


@settings(max_examples=80, deadline=None)
@given(st.lists(EXPRESSIONS, min_size=1, max_size=4))
def test_minimize_keeps_the_language_and_leaves_no_two_states_alike(exprs: list[tuple[Node, str]]) -> None:
    """Minimizing a union (whose tools' alike tails stay apart) gives an automaton equivalent to it, pair of
    states by pair (an exact check: every state pair reachable together agrees on acceptance), in which no two
    states are equivalent (Moore refinement, written here independently, splits it into singletons)."""
    dfas = [compile_dfa(node) for node, _ in exprs]
    union = union_dfas(dfas) if len(dfas) > 1 else dfas[0]
    small = minimize(union)
    assert small.num_states <= union.num_states
    assert _all_can_finish(small)
    if union.start == DEAD:
        assert small.start == DEAD
        return
    assert small.start == 1
    seen = {(union.start, small.start)}
    todo = list(seen)
    while todo:
        a, b = todo.pop()
        assert bool(union.accepting[a]) == bool(small.accepting[b])
        for byte in range(256):
            pair = (int(union.trans[a, union.classes[byte]]), int(small.trans[b, small.classes[byte]]))
            assert (pair[0] == DEAD) == (pair[1] == DEAD)
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    block = small.accepting.astype(np.int64)
    block[DEAD] = 2
    while True:
        rows = np.concatenate([block[:, None], block[small.trans]], axis=1)
        refined = np.unique(rows, axis=0, return_inverse=True)[1].ravel()
        if len(np.unique(refined)) == len(np.unique(block)):
            break
        block = refined
    assert len(np.unique(block)) == small.num_states


def test_tools_sharing_arguments_share_their_tails_and_a_precomputed_set_is_minimal(bytelevel_vocab) -> None:
    """Tools with the same parameters are one group (their arguments' automaton once); a tool set indexed whole
    (`precompute`) is minimized first, a lazily indexed one is not (it only meets the states a call visits)."""
    from tooldec.compiler import Compiler
    from tooldec.specs import ToolSpec

    params = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}
    tools = [ToolSpec(name, "", params) for name in ("add", "subtract", "multiply")]
    one = Compiler(bytelevel_vocab).compile(tools[:1], "json", use_cache=False).dfa
    three = Compiler(bytelevel_vocab).compile(tools, "json", use_cache=False).dfa
    whole = Compiler(bytelevel_vocab).compile(tools, "json", use_cache=False, precompute=True).dfa
    # three names add a few states each; the arguments' automaton is there once
    assert three.num_states < one.num_states + 30
    assert minimize(three).num_states < three.num_states
    assert minimize(whole).num_states == whole.num_states == minimize(three).num_states


def test_empty_language_has_dead_start() -> None:
    assert compile_dfa(NOTHING).start == DEAD
    assert compile_dfa(seq(lit("a"), NOTHING)).start == DEAD
    assert compile_dfa(Intersect((lit("a"), lit("b")))).start == DEAD


class _Stopped(Exception):
    pass


def test_a_signal_stops_a_long_compile_with_its_own_exception() -> None:
    # 2**18 DFA states (about 1.5 s here): the core checks Python's signals while it builds, and the exception
    # the handler raised reaches the caller as it is (not a RuntimeError of the bindings)
    ab = alt(lit("a"), lit("b"))
    node = seq(Repeat(ab, 0, None), lit("a"), Repeat(ab, 17, 17))

    def stop(signum: int, frame: object) -> None:
        raise _Stopped()

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    start = time.perf_counter()
    try:
        with pytest.raises(_Stopped):
            compile_dfa(node)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.perf_counter() - start < 1.0


@settings(max_examples=100, deadline=None)
@given(words=st.lists(st.text("ab,\n ", min_size=0, max_size=4).map(lambda w: w + "}"), min_size=1, max_size=4),
       texts=st.lists(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([",\n", "\n", ", ", ",", " ", ""])),
                               min_size=1, max_size=4), min_size=1, max_size=8),
       noise=st.lists(st.text("ab,\n }", max_size=6), max_size=4))
def test_a_separated_run_accepts_one_or_more_words_apart(words: list[str], texts: list[list[tuple[int, str]]],
                                                         noise: list[str]) -> None:
    """`separated_run` (one copy of the automaton, its ends leading back to its start through the separators) has
    the language of `w (sep w)*`: checked against Python's regex on runs of the words with separators good and bad,
    and on noise."""
    between = (",\n", "\n", ", ")
    dfa = compile_dfa(alt(*(lit(w) for w in words)))
    run = separated_run(dfa, [b.encode() for b in between])
    assert run is not None
    word = "|".join(map(re.escape, words))
    pattern = re.compile(f"(?:{word})(?:(?:{'|'.join(map(re.escape, between))})(?:{word}))*", re.DOTALL)
    for parts in texts:
        text = "".join(sep + words[i % len(words)] if k else words[i % len(words)] for k, (i, sep) in enumerate(parts))
        assert run.accepts(text.encode()) == bool(pattern.fullmatch(text)), text
    for text in noise:
        assert run.accepts(text.encode()) == bool(pattern.fullmatch(text)), text


def test_a_separated_run_is_refused_where_an_end_goes_on() -> None:
    dfa = compile_dfa(alt(lit("a}"), lit("a}b}")))  # `a}` is accepted and goes on
    assert separated_run(dfa, [b","]) is None
    assert separated_run(compile_dfa(lit("a}")), [b",", b",\n"]) is None  # one separator begins another
