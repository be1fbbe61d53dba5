"""The token index against brute force on real small vocabularies; no dead ends; the packed mask layout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.automaton.dfa import DEAD
from tooldec.compiler import Compiler
from tooldec.index import FINAL, PreparedVocab, TokenIndex, token_index, unpack
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

TOOLS = [
    ToolSpec(
        "get_weather",
        "",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city"],
        },
    ),
    ToolSpec("get_time", "", {"type": "object", "properties": {"tz": {"type": "string", "format": "date"}}}),
    ToolSpec("add", "", {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
]


@pytest.fixture(params=["json", "python"])
def compiled(request: pytest.FixtureRequest, vocab: Vocabulary):
    return Compiler(vocab).compile(TOOLS, request.param)


def _brute_force(compiled, state: int) -> tuple[list[int], list[int]]:
    vocab = compiled.index.vocab
    ids, nxt = [], []
    for t, data in enumerate(vocab.token_bytes):
        if t in vocab.eos_ids:
            if compiled.dfa.accepting[state]:
                ids.append(t)
                nxt.append(FINAL)
        elif data:
            s = compiled.dfa.step(state, data)
            if s != DEAD:
                ids.append(t)
                nxt.append(s)
    return ids, nxt


def test_index_matches_brute_force_and_has_no_dead_ends(compiled) -> None:
    index = compiled.index
    states = index.reachable_states()
    assert len(states) > 20
    for s in states:
        ids, nxt = index.transitions(s)
        want_ids, want_next = _brute_force(compiled, s)
        assert ids.tolist() == want_ids
        assert nxt.tolist() == want_next
        if not index.is_accepting(s):
            assert len(ids) > 0, f"dead end in state {s}"


def test_bitmask_layout_matches_allowed_ids(compiled) -> None:
    index = compiled.index
    for s in index.reachable_states(limit=30):
        words = index.bitmask(s)
        assert words.dtype == np.dtype("<i4") and words.shape == ((index.vocab.size + 31) // 32,)
        bits = [t for t in range(index.vocab.size) if (int(words[t >> 5]) >> (t & 31)) & 1]
        assert bits == index.allowed_ids(s).tolist()


def test_tokens_crossing_grammar_parts_are_allowed(bytelevel_vocab: Vocabulary) -> None:
    compiled = Compiler(bytelevel_vocab).compile(TOOLS, "json")
    crossing = [t for t, b in enumerate(bytelevel_vocab.token_bytes) if b in (b'",', b'"}', b'"}}')]
    assert crossing, "fixture vocabulary should contain tokens like '\",'"
    guide = compiled.guide()
    for t in bytelevel_vocab.encode('{"name": "get_weather", "arguments": {"city": "Paris'):
        guide.advance(t)
    allowed = set(guide.allowed_token_ids().tolist())
    assert set(crossing) & allowed


def test_eos_only_in_accepting_states(vocab: Vocabulary) -> None:
    compiled = Compiler(vocab).compile(TOOLS, "python")
    guide = compiled.guide()
    eos = min(vocab.eos_ids)
    text = "add(a=1, b=2.5)"
    for t in vocab.encode(text):
        assert not guide.accepts(eos)
        guide.advance(t)
    assert guide.is_accepting() and guide.accepts(eos)
    assert set(guide.allowed_token_ids().tolist()) == set(vocab.eos_ids)
    guide.advance(eos)
    assert guide.state == FINAL and guide.is_finished()
    assert guide.result().arguments == {"a": 1, "b": 2.5}


def test_rollback_and_fork(bytelevel_vocab: Vocabulary) -> None:
    guide = Compiler(bytelevel_vocab).compile(TOOLS, "python").guide()
    ids = bytelevel_vocab.encode("add(a=1")
    for t in ids:
        guide.advance(t)
    fork = guide.fork()
    guide.rollback(len(ids))
    assert guide.state == guide.index.start and guide.tokens == []
    assert fork.text() == "add(a=1"
    with pytest.raises(ValueError):
        guide.rollback(1)


def test_vocabulary_wider_than_tokenizer(bytelevel_tokenizer) -> None:
    vocab = Vocabulary.from_tokenizers(bytelevel_tokenizer, vocab_size=512)
    guide = Compiler(vocab).compile(TOOLS, "json").guide()
    assert guide.bitmask().shape == (16,)
    assert not unpack(guide.bitmask(), 512)[450:].any()


SHARED_TOOLS = [
    ToolSpec(
        "note",
        "",
        {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "body": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "short": {"type": "string", "maxLength": 3},
                "score": {"type": "number"},
                "count": {"type": "integer", "minimum": -5, "maximum": 250},
            },
            "required": ["title", "body"],
        },
    ),
    ToolSpec("nap", "", {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
]


def test_masks_match_brute_force_over_a_dirty_row(vocab: Vocabulary) -> None:
    """Every reachable state's packed mask (dense or sparse, written over a row of ones) is the brute-force set."""
    compiled = Compiler(vocab).compile(TOOLS + SHARED_TOOLS, "json", use_cache=False)
    index = compiled.index
    out = np.full(index.words, -1, dtype=np.int32)
    for s in index.reachable_states():
        index.fill_bitmask(s, out)
        ids, nxt = index.transitions(s)
        want_ids, want_next = _brute_force(compiled, s)
        assert ids.tolist() == want_ids
        assert nxt.tolist() == want_next
        assert np.flatnonzero(unpack(out, vocab.size)).tolist() == want_ids
        assert index.count(s) == len(want_ids)


def test_masks_filled_from_many_threads_agree(vocab: Vocabulary) -> None:
    """States computed concurrently on first visit (as vLLM's thread pool would) give the single-thread masks."""
    from concurrent.futures import ThreadPoolExecutor

    reference = Compiler(vocab).compile(SHARED_TOOLS, "json", use_cache=False).index
    states = reference.reachable_states()
    want = {s: reference.bitmask(s).tolist() for s in states}
    fresh = Compiler(vocab).compile(SHARED_TOOLS, "json", use_cache=False).index

    def fill(offset: int) -> dict[int, list[int]]:
        order = states[offset:] + states[:offset]
        return {s: fresh.bitmask(s).tolist() for s in order}

    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(fill, [0, len(states) // 3, len(states) // 2, len(states) - 1]):
            assert got == want


def test_string_fields_share_one_region_walk(bytelevel_vocab: Vocabulary) -> None:
    """The contents of several string fields have one shape, so the trie is walked for each shape once, however
    many fields there are (and the masks stay exact: see the brute-force tests)."""

    def regions(fields: int) -> int:
        props = {f"s{i}": {"type": "string"} for i in range(fields)}
        tool = ToolSpec("t", "", {"type": "object", "properties": props, "required": list(props)})
        index = Compiler(bytelevel_vocab).compile([tool], "json", use_cache=False).index
        index.core.compute_all()
        return index.core.num_regions

    assert 0 < regions(2) == regions(6)


@pytest.mark.parametrize("fmt", ["json", "python", "hermes"])
def test_a_compiler_pins_string_contents_so_cold_compiles_walk_none(vocab: Vocabulary, fmt: str) -> None:
    """Making a Compiler walks the plain values the call formats write (strings, default-bounded numbers) once and
    pins them in the vocabulary: a cold compile (caches off) of a tool set of such fields then walks no region, at
    compile time or on any state's first visit, its masks are still the brute-force sets, and a second Compiler
    over the same vocabulary pins nothing more."""
    compiler = Compiler(vocab)
    pinned = compiler.prepared.core.pinned_regions
    assert pinned >= 2
    props = {"q": {"type": "string"}, "lang": {"type": "string"}, "n": {"enum": [1, 2]}}
    tool = ToolSpec("search", "", {"type": "object", "properties": props, "required": ["q"]})
    compiled = compiler.compile([tool, TOOLS[2]], fmt, use_cache=False)
    assert compiled.index.core.num_regions > 0, "the string regions are indexed at compile time"
    for s in compiled.index.reachable_states():
        assert compiled.index.transitions(s)[0].tolist() == _brute_force(compiled, s)[0]
    assert compiled.index.core.num_walks == 0
    Compiler(compiler.prepared)
    assert compiler.prepared.core.pinned_regions == pinned


def test_a_compiler_pins_the_same_walks_whatever_its_compiles_index_whole(monkeypatch) -> None:
    """The probe tools' walks are pinned from an index that walked each region itself, not from the compile's own:
    a small automaton is indexed whole, most of its states taking a walk from a state alike, and pinning that
    index kept half the walks (a number's regions then walked the trie again on later first visits)."""
    whole = Compiler(PreparedVocab(_digit_vocab())).prepared.core.pinned_regions
    monkeypatch.setattr(token_index, "EAGER_BUDGET", 0)  # the probes' compiles lazy
    assert Compiler(PreparedVocab(_digit_vocab())).prepared.core.pinned_regions == whole > 0


def test_digit_count_states_share_entries_and_stay_exact(vocab: Vocabulary) -> None:
    """A bounded number counts its digits in states that walk the vocabulary alike once the count left is longer
    than any digit token: they share one trie walk and one stored entry, and every state's mask is still the
    brute-force set."""
    tool = ToolSpec(
        "f", "", {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "integer"}}, "required": ["x", "y"]}
    )
    compiled = Compiler(vocab).compile([tool], "json", use_cache=False)
    index = TokenIndex(compiled.dfa, PreparedVocab(vocab))  # a vocabulary without the Compiler's pinned walks
    states = index.reachable_states()
    assert index.core.num_masks < index.core.computed
    assert 0 < index.core.num_walks < index.core.num_regions  # regions alike as far as their walks read: one walk
    for s in states:
        ids, _ = index.transitions(s)
        assert ids.tolist() == _brute_force(compiled, s)[0]
        assert np.flatnonzero(unpack(index.bitmask(s), vocab.size)).tolist() == ids.tolist()


def test_a_guide_fills_any_row_of_any_bitmask_it_is_given(compiled) -> None:
    """Guide.fill_bitmask writes through a kept data pointer: switching arrays and rows writes the right row of
    the right array, and a wrong array or row is refused instead of written past."""
    index = compiled.index
    guide = compiled.guide()
    a = np.full((3, index.words), -1, dtype=np.int32)
    b = np.zeros((2, index.words), dtype=np.int32)
    for out, row in ((a, 2), (b, 0), (a, 0), (b, 1)):
        guide.fill_bitmask(out, row)
        assert np.array_equal(out[row], index.bitmask(guide.state))
    guide.advance(int(index.allowed_ids(guide.state)[0]))
    guide.fill_bitmask(a, 2)
    assert np.array_equal(a[2], index.bitmask(guide.state)), "the same array, a new state"
    assert (a[1] == -1).all(), "a row not asked for was written"
    with pytest.raises(IndexError):
        guide.fill_bitmask(a, 3)
    with pytest.raises(ValueError, match="int32"):
        guide.fill_bitmask(np.zeros((1, index.words), dtype=np.int64))
    with pytest.raises(ValueError, match="int32"):
        guide.fill_bitmask(np.zeros((1, index.words + 1), dtype=np.int32))
    frozen = np.zeros((1, index.words), dtype=np.int32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        guide.fill_bitmask(frozen)


@settings(max_examples=25, deadline=None)
@given(
    extra=st.lists(st.text(alphabet='ab"\\ :,{}é\n', min_size=1, max_size=4).map(str.encode), max_size=40),
    repeats=st.lists(st.integers(0, 120), max_size=6),
    seed=st.randoms(use_true_random=False),
)
def test_region_walks_take_every_token_of_the_same_bytes(extra: list[bytes], repeats: list[int], seed) -> None:
    """Tokens spelled alike (several ids, one trie node), vocabulary sizes off a 32-token word, bytes around a
    string's quote and backslash, plain-text subtrees a walk takes whole: each reachable state's mask is still the
    brute-force set."""
    base = [bytes([b]) for b in range(0x20, 0x7F)] + [b'", "', b'": "', b'"}', b"\\u00", "é".encode(), b"\xc3"]
    tokens: list[bytes | None] = base + extra
    tokens += [tokens[i % len(tokens)] for i in repeats]
    seed.shuffle(tokens)
    vocab = Vocabulary.from_bytes([*tokens, None], eos_id=len(tokens))
    tool = ToolSpec("say", "", {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    compiled = Compiler(vocab).compile([tool], "json", use_cache=False)
    for s in compiled.index.reachable_states():
        ids, nxt = compiled.index.transitions(s)
        assert (ids.tolist(), nxt.tolist()) == _brute_force(compiled, s)
        assert np.flatnonzero(unpack(compiled.index.bitmask(s), vocab.size)).tolist() == ids.tolist()


def test_compile_indexes_the_opening_text_up_to_the_first_choice(bytelevel_vocab: Vocabulary, monkeypatch) -> None:
    """Past EAGER_BUDGET, `warm` builds the masks of the states every call walks (`{"name": "`, then a choice of
    tool) and no others."""
    monkeypatch.setattr(token_index, "EAGER_BUDGET", 0)
    params = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    tools = [ToolSpec("alpha", "", params), ToolSpec("beta", "", params)]
    index = Compiler(bytelevel_vocab).compile(tools, "json", use_cache=False).index
    opening = b'{"name": "'
    assert index.core.computed == len(opening) + 1  # the start and one state after each byte
    state = index.dfa.step(index.start, opening)
    assert index.count(state) >= 2 and index.core.computed == len(opening) + 1
    index.count(index.dfa.step(state, b"a"))
    assert index.core.computed == len(opening) + 2, "the state after the choice had been indexed already"


def test_a_small_automaton_is_indexed_whole_at_compile(bytelevel_vocab: Vocabulary) -> None:
    """Within EAGER_BUDGET every state's mask is built at compile time, so no step of a call computes one."""
    import random

    from tooldec.sample import random_walk

    compiled = Compiler(bytelevel_vocab).compile(TOOLS, "json", use_cache=False)
    index = compiled.index
    assert index.core.num_states * index.words <= token_index.EAGER_BUDGET
    assert index.core.computed == index.core.num_states - 1  # every state but the dead one
    for seed in range(10):
        random_walk(compiled.guide(), random.Random(seed))
    assert index.core.computed == index.core.num_states - 1


def _digit_vocab() -> Vocabulary:
    """Every number from 0 to 999 a token (as llama3 writes digits), single bytes, and tokens that run from a
    number into what follows it (`5,`, `0}`, `", "`)."""
    tokens: list[bytes | None] = [bytes([b]) for b in range(0x20, 0x7F)]
    tokens += [str(n).encode() for n in range(10, 1000)]
    tokens += [b"00", b"000", b"5,", b"0}", b"12,", b'", "', b'": ', b"}}", b".5", b"e-", b"-1", b"name", b"arguments"]
    return Vocabulary.from_bytes([*tokens, None], eos_id=len(tokens))


def test_states_alike_share_region_walks_and_stay_exact() -> None:
    """Indexed whole, a tool set's number states take the region walk of a state alike as far as that walk reads
    (`share_alike`: one number's digit counts, and the same counts of every other number) instead of finding their
    own region: fewer regions found than indexing state by state, and every mask, however the states are visited,
    is still the brute-force set."""
    import random

    vocab = _digit_vocab()
    number = {"type": "number"}
    tools = [
        ToolSpec(name, "", {"type": "object", "properties": {k: number for k in keys}, "required": list(keys[:2])})
        for name, keys in (("add", "abcd"), ("sub", "ab"), ("pow", "xy"), ("log", "xb"))
    ]
    compiled = Compiler(vocab).compile(tools, "json", use_cache=False)
    eager = compiled.index
    assert eager.core.computed == eager.core.num_states - 1
    plain = TokenIndex(compiled.dfa, PreparedVocab(vocab))
    plain.core.compute_all(1)
    assert 0 < eager.core.num_regions < plain.core.num_regions
    lazy = TokenIndex(compiled.dfa, PreparedVocab(vocab))
    lazy.core.share_alike(token_index.ALIKE_ROUNDS)
    lazy.core.share_alike(1)  # a second call changes nothing
    states = list(range(1, compiled.dfa.num_states))
    random.Random(0).shuffle(states)
    for s in states:
        want = _brute_force(compiled, s)[0]
        for index in (eager, lazy):
            got = np.flatnonzero(unpack(index.bitmask(s), vocab.size)).tolist()
            assert got == want
            assert index.count(s) == len(want)
