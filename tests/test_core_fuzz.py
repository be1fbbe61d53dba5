"""The compiled core's bindings take any Python value without crashing: empty, malformed, wrong-dtype, wrong-shape
and out-of-range arguments to every `tooldec._core` function and method raise a Python exception (ValueError,
IndexError or TypeError), and well-formed ones still work. Run under AddressSanitizer and UBSan by
tests/sanitize/run.sh, where a read or write out of bounds aborts the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tooldec import _core
from tooldec.automaton.compile import compile_dfa
from tooldec.grammar.ir import Repeat, alt, lit, one_of_bytes, seq

EXPECTED = (ValueError, IndexError, TypeError)
# float junk cast to int arrays warns; the cast itself is what is fuzzed
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])

TOKENS = [b"a", b"b", b"ab", b"{", b"}", b'"', b"x", b'{"', b"ba", b"", b"\xff"]
EOS = 9


def _vocab_arrays(tokens: list[bytes] = TOKENS) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8).copy()
    offsets = np.cumsum([0] + [len(t) for t in tokens], dtype=np.int64)
    return flat, offsets, np.array([EOS], dtype=np.int32), len(tokens) + 3


def _dfa() -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    d = compile_dfa(seq(lit("{"), Repeat(alt(lit("a"), one_of_bytes("bx")), 0, None), lit("}")))
    return np.ascontiguousarray(d.trans, dtype=np.int32), d.classes.copy(), d.accepting.copy(), d.start


VOCAB = _core.Vocab(*_vocab_arrays())
DFA = _dfa()
INDEX = _core.Index(VOCAB, DFA[0], DFA[1], DFA[2])


def _calls_fail_cleanly(call: Callable[[], Any]) -> None:
    """Run `call`: it returns or raises one of EXPECTED, never anything else (and never crashes the process)."""
    try:
        call()
    except EXPECTED:
        pass


DTYPES = st.sampled_from([np.int8, np.uint8, np.int32, np.uint32, np.int64, np.float64, np.bool_])
ARRAYS = hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
EXTREMES = st.sampled_from([0, 1, -1, 2, 255, 256, -(2**31), 2**31 - 1, 2**31, 2**40, -(2**63), 2**63 - 1, 2**70])
JUNK = st.one_of(st.none(), st.text(max_size=3), st.floats(), EXTREMES, st.lists(EXTREMES, max_size=4), ARRAYS,
                 st.tuples(ARRAYS, ARRAYS))
INTS = st.one_of(EXTREMES, st.integers(-5, 40))
INT64 = EXTREMES.filter(lambda v: -(2**63) <= v < 2**63)


def _mutated(array: np.ndarray, data: st.DataObject) -> Any:
    """The array with one change: a cell set to an extreme value, a row dropped or added, another dtype, or junk."""
    how = data.draw(st.sampled_from(["cell", "shape", "dtype", "junk", "empty", "same"]))
    a = np.array(array, copy=True)
    if how == "cell" and a.size:
        flat = a.reshape(-1).astype(np.int64)
        flat[data.draw(st.integers(0, flat.size - 1))] = data.draw(st.integers(-(2**31), 2**31 - 1) | INT64)
        return flat.reshape(a.shape)
    if how == "shape" and a.ndim:
        return a[:-1] if data.draw(st.booleans()) else np.concatenate([a, a[:1]])
    if how == "dtype":
        return a.astype(data.draw(DTYPES))
    if how == "junk":
        return data.draw(JUNK)
    if how == "empty":
        return a[:0] if a.ndim else np.zeros(0, dtype=a.dtype)
    return a


def _dfa_args(data: st.DataObject) -> list[Any]:
    """A valid DFA's (trans, classes, accepting, start), one of them mutated."""
    args: list[Any] = list(DFA)
    at = data.draw(st.integers(0, 3))
    args[at] = data.draw(INTS) if at == 3 else _mutated(args[at], data)
    return args


@FUZZ
@given(st.data())
def test_minimize_and_product_refuse_malformed_dfas(data: st.DataObject) -> None:
    a = _dfa_args(data)
    _calls_fail_cleanly(lambda: _core.minimize_dfa(*a))
    b = _dfa_args(data)
    max_states = data.draw(st.one_of(st.just(1000), INTS))
    diff = data.draw(st.booleans())
    _calls_fail_cleanly(lambda: _core.product(*a, *b, diff, max_states))


@FUZZ
@given(st.data())
def test_union_refuses_malformed_lists(data: st.DataObject) -> None:
    parts: list[Any] = [tuple(_dfa_args(data)) for _ in range(data.draw(st.integers(0, 3)))]
    if data.draw(st.booleans()):
        parts.append(data.draw(JUNK))
    max_states = data.draw(st.one_of(st.just(1000), INTS))
    _calls_fail_cleanly(lambda: _core.union_dfas(parts, max_states))


def test_valid_calls_still_work_and_empty_ones_are_refused() -> None:
    assert _core.minimize_dfa(*DFA)[0].shape[0] >= 2
    assert _core.union_dfas([DFA, DFA], 1000)[3] != _core.DEAD
    assert _core.product(*DFA, *DFA, False, 1000)[3] == 1
    with pytest.raises(ValueError, match="no DFAs"):
        _core.union_dfas([], 1000)
    with pytest.raises(ValueError):
        _core.union_dfas([DFA], -1)
    with pytest.raises(ValueError):
        _core.minimize_dfa(np.zeros((0, 1), np.int32), np.zeros(256, np.uint8), np.zeros(0, bool), 0)
    with pytest.raises(IndexError):
        _core.minimize_dfa(DFA[0], DFA[1], DFA[2], DFA[0].shape[0])


def _ir(records: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    code = np.array([x for r in records for x in r], dtype=np.int32)
    ptr = np.cumsum([0] + [len(r) for r in records], dtype=np.int64)
    return code, ptr


MASKS = np.full((2, 32), 0xFF, dtype=np.uint8)
RECORD = st.lists(st.one_of(st.integers(-2, 6), EXTREMES.filter(lambda v: -(2**31) <= v < 2**31)), min_size=0,
                  max_size=7)


@FUZZ
@given(st.lists(RECORD, max_size=8), st.lists(INTS, max_size=3), st.data())
def test_compile_irs_refuses_malformed_node_tables(records: list[list[int]], roots: list[int], data: st.DataObject) -> None:
    code, ptr = _ir(records)
    if data.draw(st.booleans()):
        ptr = _mutated(ptr, data)
    masks = MASKS if data.draw(st.booleans()) else _mutated(MASKS, data)
    dfas = [DFA] if data.draw(st.booleans()) else [tuple(_dfa_args(data))]
    roots = [r for r in roots if -(2**31) <= r < 2**31]
    limit = data.draw(st.one_of(st.just(500), INTS))
    threads = data.draw(st.sampled_from([1, 4, -3, 2**31 - 1]))
    _calls_fail_cleanly(lambda: _core.compile_irs(code, ptr, masks, dfas, roots, limit, 500, threads))


def test_compile_irs_refuses_cycles_and_deep_nesting_and_builds_the_rest() -> None:
    byte = [0, 0]
    code, ptr = _ir([byte, [1, 2, 0, 1]])  # SEQ of node 0 and itself: a child must come before its parent
    with pytest.raises(ValueError, match="earlier node"):
        _core.compile_irs(code, ptr, MASKS, [], [1], 100, 100)
    deep = [byte] + [[1, 1, i] for i in range(20_000)]
    code, ptr = _ir(deep)
    with pytest.raises(ValueError, match="deeper"):
        _core.compile_irs(code, ptr, MASKS, [], [len(deep) - 1], 10**6, 10**6)
    code, ptr = _ir(deep[:1400])
    (got,) = _core.compile_irs(code, ptr, MASKS, [], [1399], 10**6, 10**6)
    assert got[0].shape[0] == 3  # dead, start, accept
    code, ptr = _ir([byte, [3, 0, 2**31 - 1, -1, -1]])  # a huge repeat stops at the state bound
    assert isinstance(_core.compile_irs(code, ptr, MASKS, [], [1], 1000, 1000)[0], str)
    code, ptr = _ir([byte, [5, 0]])
    (got,) = _core.compile_irs(code, ptr, MASKS, [DFA], [1], 1000, 1000)
    assert got[3] == 1
    with pytest.raises(IndexError):
        _core.compile_irs(code, ptr, MASKS, [], [1], 1000, 1000)
    roots = list(range(2)) * 20  # enough roots for several threads
    code, ptr = _ir([byte, [3, 0, 5, 2**31 - 1, -1]])
    built = _core.compile_irs(code, ptr, MASKS, [], roots, 10**6, 10**6, 4)
    assert len(built) == 40


@FUZZ
@given(st.data())
def test_vocab_refuses_malformed_arrays(data: st.DataObject) -> None:
    args: list[Any] = list(_vocab_arrays())
    at = data.draw(st.integers(0, 3))
    args[at] = data.draw(INTS) if at == 3 else _mutated(args[at], data)
    _calls_fail_cleanly(lambda: _core.Vocab(*args))


def test_vocab_bounds() -> None:
    flat, offsets, eos, size = _vocab_arrays()
    for bad in (-1, 2**40, len(TOKENS) - 1):
        with pytest.raises(ValueError):
            _core.Vocab(flat, offsets, eos, bad)
    with pytest.raises(ValueError):
        _core.Vocab(flat, offsets[:0], eos, size)
    with pytest.raises(IndexError):
        _core.Vocab(flat, offsets, np.array([size], np.int32), size)
    assert _core.Vocab(flat[:0], np.zeros(1, np.int64), eos[:0], 0).size == 0


@FUZZ
@given(st.data())
def test_index_refuses_malformed_automata(data: st.DataObject) -> None:
    args = _dfa_args(data)[:3]
    vocab = VOCAB if data.draw(st.booleans()) else data.draw(JUNK)
    _calls_fail_cleanly(lambda: _core.Index(vocab, *args))


@FUZZ
@given(INTS, st.data())
def test_index_methods_refuse_states_tokens_and_buffers_out_of_range(state: int, data: st.DataObject) -> None:
    index = _core.Index(VOCAB, *DFA[:3])
    out = np.zeros(index.words, dtype=np.int32)
    buffer = data.draw(st.one_of(st.just(out), JUNK))
    tokens = data.draw(st.one_of(hnp.arrays(np.int64, st.integers(0, 5), elements=INT64), JUNK))
    token = data.draw(INTS)
    calls: list[Callable[[], Any]] = [
        lambda: index.next_state(state, token),
        lambda: index.advance_many(state, tokens),
        lambda: index.count(state),
        lambda: index.fill(state, buffer),
        lambda: index.fill_at(state, out.ctypes.data),
        lambda: index.transitions(state),
        lambda: index.warm_path(state, token),
        lambda: index.cached(state),
        lambda: index.compute_all(data.draw(st.sampled_from([1, 2, 0, -1, 2**31 - 1]))),
        lambda: index.compute_regions(data.draw(st.sampled_from([1, 2, 0, -1, 2**31 - 1]))),
        lambda: index.share_alike(data.draw(INTS)),
    ]
    for call in calls:
        _calls_fail_cleanly(call)
    assert index.finished()[0] is False
    index.pin_regions()


def test_index_checks() -> None:
    with pytest.raises(TypeError):
        _core.Index(None, *DFA[:3])
    with pytest.raises(IndexError):
        INDEX.count(DFA[0].shape[0])
    with pytest.raises(IndexError):
        INDEX.transitions(DFA[0].shape[0])
    with pytest.raises(ValueError):
        INDEX.fill_at(1, 0)
    with pytest.raises(ValueError):
        INDEX.fill(1, np.zeros(INDEX.words + 1, np.int32))
    for rounds in (0, -1, 65):
        with pytest.raises(ValueError):
            INDEX.share_alike(rounds)
    assert len(INDEX.transitions(_core.FINAL)[0]) == 0


@FUZZ
@given(st.data())
def test_fill_bitmasks_refuses_malformed_sources(data: st.DataObject) -> None:
    words = INDEX.words
    out = np.zeros((3, words), dtype=np.int32)
    if data.draw(st.booleans()):
        out = data.draw(st.one_of(ARRAYS, st.just(out[:, :0]), st.just(out.T.copy()), st.just(np.zeros(words))))
    source = st.one_of(st.none(), st.tuples(st.just(INDEX), INTS), st.tuples(st.one_of(JUNK, st.just(VOCAB)), INTS),
                       st.just(np.zeros(words, np.int32)), JUNK, st.tuples(st.just(INDEX)))
    sources = data.draw(st.lists(source, max_size=40))
    rows = data.draw(st.one_of(st.just(np.zeros(len(sources), np.int32)), hnp.arrays(np.int32, len(sources)),
                               ARRAYS))
    threads = data.draw(st.sampled_from([1, 2, 4, 0, 2**31 - 1]))
    _calls_fail_cleanly(lambda: _core.fill_bitmasks(out, sources, rows, threads))


def test_fill_bitmasks_refuses_read_only_output_and_null_index() -> None:
    out = np.zeros((1, INDEX.words), dtype=np.int32)
    out.flags.writeable = False
    with pytest.raises(ValueError):
        _core.fill_bitmasks(out, [None], np.zeros(1, np.int32))
    with pytest.raises(ValueError):
        _core.fill_bitmasks(np.zeros((1, INDEX.words), np.int32), [(None, 1)], np.zeros(1, np.int32))
    with pytest.raises(IndexError):
        _core.fill_bitmasks(np.zeros((1, INDEX.words), np.int32), [(INDEX, 10**6)], np.zeros(1, np.int32))
    many = np.zeros((64, INDEX.words), dtype=np.int32)
    _core.fill_bitmasks(many, [(INDEX, 1)] * 64, np.arange(64, dtype=np.int32), 4)
    single = np.zeros(INDEX.words, dtype=np.int32)
    INDEX.fill(1, single)
    assert (many == single).all()


def test_apply_bitmask_checks_sizes_pointers_and_rows() -> None:
    logits = np.zeros((2, 40), dtype=np.float32)
    mask = np.zeros((2, 2), dtype=np.int32)
    mask[:, 0] = 1
    rows = np.array([0, 5], dtype=np.int32)
    ptrs = (logits.ctypes.data, mask.ctypes.data)
    for args in [(ptrs[0], -1, 40, 40, ptrs[1], 2), (ptrs[0], 2, 40, 40, 0, 2), (0, 2, 40, 40, ptrs[1], 2),
                 (ptrs[0], 2, 40, 10, ptrs[1], 2), (ptrs[0], 2, 40, 40, ptrs[1], -2)]:
        with pytest.raises(ValueError):
            _core.apply_bitmask_f32(*args)
    with pytest.raises(IndexError):
        _core.apply_bitmask_f32(ptrs[0], 2, 40, 40, ptrs[1], 2, rows.ctypes.data, 2)
    _core.apply_bitmask_f32(ptrs[0], 2, 40, 40, ptrs[1], 2)
    assert logits[0, 0] == 0 and np.isneginf(logits[:, 1:]).all()
    _core.apply_bitmask_f32(0, 0, 0, 0, 0, 0)


def _walk_args() -> list[Any]:
    """A valid token_walk call over DFA: one class per DFA class, two modes (0 reads on, `}` closes the token)."""
    trans = DFA[0]
    k = trans.shape[1]
    modes = np.zeros((2, k), dtype=np.int64)
    modes[0, DFA[1][ord("}")]] = -2
    return [trans, np.arange(k, dtype=np.int32), modes, DFA[3], 0, None, 1000]


@FUZZ
@given(st.data())
def test_token_walk_refuses_malformed_tables(data: st.DataObject) -> None:
    args = _walk_args()
    at = data.draw(st.integers(0, 6))
    if at in (3, 4, 6):
        args[at] = data.draw(INTS)
    elif at == 5:
        args[at] = _mutated(np.zeros(DFA[0].shape[0], dtype=bool), data)
    else:
        args[at] = _mutated(args[at], data)
    _calls_fail_cleanly(lambda: _core.token_walk(*args))


def test_token_walk_walks_and_bounds() -> None:
    """From `{`'s target the walk reads `a`, `b`, `x` and closes at `}` into the accepting state; a bound below
    its size is AutomatonTooLarge."""
    args = _walk_args()
    args[3] = int(DFA[0][DFA[3], DFA[1][ord("{")]])
    size, src, cls, dst, landings = _core.token_walk(*args)
    assert size == 2 and len(src) == len(cls) == len(dst) and list(src) == sorted(src)  # the start, then the loop
    assert len(landings) == 1 and DFA[2][landings[0][0]]
    assert (landings[0][1][:, 1] == DFA[1][ord("}")]).all() and 0 in landings[0][2]
    args[6] = 1
    with pytest.raises(_core.AutomatonTooLarge):
        _core.token_walk(*args)
