"""Properties of the context-free-grammar guide, with `lark` as the oracle.

For the five shared grammars (copied into tests/data/cfg/) and four hard cases (`"x"?` five times, the ambiguous
`a: a a | "x"`, single-character terminals under `+`, brackets nested 1,000 deep):
- completeness: the sample is accepted byte by byte and token by token (both fixture tokenizers), then EOS;
- soundness: seeded random guided walks (uniform over the allowed tokens, EOS included) that end in EOS parse
  with lark;
- exactness: byte mutations of the sample are accepted (all bytes, then EOS) exactly when lark accepts them;
- the mask equals brute force at prefixes of the sample: a token is allowed iff a fresh guide accepts the
  prefix's bytes followed by the token's bytes.

Each property runs on tooldec (`Compiler.compile_grammar`) and on llguidance (skipped
when not installed) through the same small guide interface: a reference engine passing the same properties
shows that a failure on tooldec is tooldec's, not the oracle's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.errors import TokenRejectedError
from tooldec.vocab import Vocabulary

lark = pytest.importorskip("lark")

DATA = Path(__file__).parent / "data" / "cfg"


@dataclass(frozen=True)
class Case:
    """A grammar (Lark text), a valid sample, the cap on tokens of a random walk and the share of walks that must
    reach EOS within it."""

    name: str
    grammar: str
    sample: str
    walk_cap: int = 80
    min_ended: float = 0.5


def _shared(stem: str, min_ended: float = 0.5) -> Case:
    """One of the shared grammars with its sample."""
    return Case(stem, (DATA / f"{stem}.lark").read_text(encoding="utf-8"),
                (DATA / f"{stem}.sample.txt").read_text(encoding="utf-8"), min_ended=min_ended)


NESTED = 'start: arr\narr: "[" (arr ("," arr)*)? "]"\n'

CASES = [
    _shared("json"),
    _shared("sql", min_ended=0.1),  # uniform walks mostly extend names and strings: ~15% end within 80 tokens
    _shared("arith_leftrec"),
    _shared("pycall", min_ended=0.03),  # ~5% end: a name, a string or an argument list rarely closes by chance
    _shared("nested300"),
    Case("optional5", 'start: "x"? "x"? "x"? "x"? "x"?\n', "xxx"),
    Case("ambiguous", 'start: a\na: a a | "x"\n', "xxxxx", walk_cap=24),
    Case("chars_plus", 'start: ("a" | "b" | "c" | "," | " ")+\n', "a, b,, c ab"),
    Case("nested1000", NESTED, "[" * 1000 + "]" * 500 + ",[[],[]]" + "]" * 500),
]
IDS = [c.name for c in CASES]

WALKS = 1000
"""Random guided walks per grammar (those stopped at their cap are not parsed)."""


# --- the oracle ---------------------------------------------------------------------------------------------------


class _Conflicts(logging.Handler):
    """Collects lark's conflict warnings (it resolves shift/reduce conflicts as shift, silently unless debug)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the messages that report a conflict."""
        if "conflict" in record.getMessage().lower():
            self.messages.append(record.getMessage())


@contextmanager
def _lark_conflicts() -> Iterator[_Conflicts]:
    """lark's logger at debug level with a conflict collector attached, for the duration."""
    handler, level = _Conflicts(), lark.logger.level
    lark.logger.addHandler(handler)
    lark.logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        lark.logger.removeHandler(handler)
        lark.logger.setLevel(level)


@dataclass(frozen=True)
class Oracle:
    """A lark parser of the grammar and the mode it runs in (`lalr/contextual` or `earley/basic`)."""

    mode: str
    parser: Any

    def accepts(self, data: bytes) -> bool:
        """Whether lark parses `data` (UTF-8) as a whole sentence of the grammar."""
        try:
            self.parser.parse(data.decode("utf-8"))
        except (lark.exceptions.LarkError, UnicodeDecodeError):
            return False
        return True


def oracle(grammar: str) -> Oracle:
    """LALR(1) with the contextual lexer when the grammar has no conflict (lark would resolve a shift/reduce one
    as shift, shrinking the language), else Earley with the basic lexer."""
    with _lark_conflicts() as conflicts:
        try:
            parser = lark.Lark(grammar, parser="lalr", lexer="contextual", debug=True)
        except lark.exceptions.GrammarError:
            parser = None
    if parser is not None and not conflicts.messages:
        return Oracle("lalr/contextual", parser)
    return Oracle("earley/basic", lark.Lark(grammar, parser="earley", lexer="basic"))


_ORACLES: dict[str, Oracle] = {}


def oracle_of(case: Case) -> Oracle:
    """The case's oracle, built once."""
    if case.name not in _ORACLES:
        _ORACLES[case.name] = oracle(case.grammar)
    return _ORACLES[case.name]


def test_oracle_picks_lalr_only_without_conflicts() -> None:
    assert oracle(NESTED).mode == "lalr/contextual"
    assert oracle('start: a\na: a a | "x"\n').mode == "earley/basic"
    assert oracle('start: a\na: a a | "x"\n').accepts(b"xxx")
    assert not oracle(NESTED).accepts(b"[[]")


# --- the engines under test, behind the guide contract ------------------------------------------------------------


class Guide(Protocol):
    """The CFG guide contract the properties use (tooldec's; llguidance's matcher is wrapped to it)."""

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None: ...
    def advance(self, token_id: int) -> None: ...
    def accepts(self, token_id: int) -> bool: ...
    def is_accepting(self) -> bool: ...
    def rollback(self, n: int = 1) -> None: ...
    def accept_bytes(self, data: bytes) -> int: ...
    def text(self) -> str: ...


NewGuide = Callable[[], Guide]


class LLGuidanceGuide:
    """llguidance's LLMatcher wrapped to the guide contract; bytes are fed as single-byte tokens."""

    def __init__(self, matcher: Any, vocab: Vocabulary, byte_tokens: list[int]) -> None:
        self.matcher, self.vocab, self.byte_tokens = matcher, vocab, byte_tokens
        self.tokens: list[int] = []

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None:
        """Compute the mask into row `row`."""
        target = out[row]
        self.matcher.unsafe_compute_mask_ptr(target.ctypes.data, target.nbytes)

    def accepts(self, token_id: int) -> bool:
        """Whether the matcher would consume the token."""
        return bool(self.matcher.validate_tokens([token_id]) == 1)

    def advance(self, token_id: int) -> None:
        """Consume the token; TokenRejectedError (state unchanged) when it is not allowed."""
        if not self.accepts(token_id):
            raise TokenRejectedError(f"token {token_id} rejected")
        self.matcher.consume_token(token_id)
        self.tokens.append(token_id)

    def is_accepting(self) -> bool:
        """Whether the text so far is a sentence."""
        return bool(self.matcher.is_accepting())

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` tokens."""
        self.matcher.rollback(n)
        del self.tokens[len(self.tokens) - n:]

    def accept_bytes(self, data: bytes) -> int:
        """Consume `data` one single-byte token at a time; how many bytes were accepted."""
        done = int(self.matcher.try_consume_tokens([self.byte_tokens[b] for b in data]))
        self.tokens.extend(self.byte_tokens[b] for b in data[:done])
        return done

    def text(self) -> str:
        """The text of the consumed tokens."""
        return b"".join(self.vocab.token_bytes[t] or b"" for t in self.tokens).decode("utf-8", "replace")


def _tooldec_compiler(vocab: Vocabulary, tokenizer: Any) -> Callable[[str], NewGuide]:
    """tooldec's compile: `Compiler(vocab).compile_grammar(text, syntax="lark")`, a guide per call."""
    from tooldec.compiler import Compiler

    compiler = Compiler(vocab)
    return lambda text: compiler.compile_grammar(text, syntax="lark").guide


def _llguidance_compiler(vocab: Vocabulary, tokenizer: Any) -> Callable[[str], NewGuide]:
    """llguidance's Lark front end on an LLTokenizer of the same fixture tokenizer."""
    llguidance = pytest.importorskip("llguidance")
    eos = min(vocab.eos_ids)
    lltok = llguidance.LLTokenizer(tokenizer.to_str(), n_vocab=vocab.size, eos_token=eos)
    byte_tokens: dict[int, int] = {}
    for token_id, piece in enumerate(vocab.token_bytes):
        if piece is not None and len(piece) == 1:
            byte_tokens.setdefault(piece[0], token_id)
    table = [byte_tokens[b] for b in range(256)]

    def compile_text(text: str) -> NewGuide:
        grammar = llguidance.LLMatcher.grammar_from_lark(text)
        matcher = llguidance.LLMatcher(lltok, grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        return lambda: LLGuidanceGuide(matcher.deep_copy(), vocab, table)

    return compile_text


ENGINES = {"tooldec": _tooldec_compiler, "llguidance": _llguidance_compiler}
_COMPILED: dict[tuple[str, str, str], NewGuide] = {}


@pytest.fixture(scope="module", params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn."""
    return str(request.param)


def guides(engine: str, vocab_name: str, case: Case, request: pytest.FixtureRequest) -> NewGuide:
    """A factory of fresh guides of `case` on a fixture vocabulary, compiled once per (engine, vocabulary, case)."""
    key = (engine, vocab_name, case.name)
    if key not in _COMPILED:
        vocab = request.getfixturevalue(f"{vocab_name}_vocab")
        tokenizer = request.getfixturevalue(f"{vocab_name}_tokenizer")
        _COMPILED[key] = ENGINES[engine](vocab, tokenizer)(case.grammar)
    return _COMPILED[key]


def _mask(guide: Guide, vocab: Vocabulary) -> np.ndarray:
    """The guide's mask as booleans over the vocabulary."""
    out = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    guide.fill_bitmask(out, row=0)
    return np.unpackbits(out.view(np.uint8), bitorder="little")[: vocab.size].astype(bool)


# --- completeness -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("vocab_name", ["bytelevel", "sentencepiece"])
def test_sample_is_accepted_by_bytes_and_by_tokens(
    engine: str, vocab_name: str, case: Case, request: pytest.FixtureRequest
) -> None:
    vocab: Vocabulary = request.getfixturevalue(f"{vocab_name}_vocab")
    new_guide, eos, data = guides(engine, vocab_name, case, request), min(vocab.eos_ids), case.sample.encode()
    assert oracle_of(case).accepts(data), "the sample itself must parse"
    guide = new_guide()
    assert guide.accept_bytes(data) == len(data)
    assert guide.is_accepting() and _mask(guide, vocab)[eos]
    assert guide.text() == case.sample

    tokens = vocab.encode(case.sample)
    assert b"".join(vocab.token_bytes[t] or b"" for t in tokens) == data
    guide = new_guide()
    for k, token in enumerate(tokens):
        assert _mask(guide, vocab)[token], f"sample token {k} ({vocab.token_bytes[token]!r}) not in the mask"
        assert guide.accepts(token)
        guide.advance(token)
    assert guide.is_accepting() and _mask(guide, vocab)[eos]
    half = len(tokens) // 2
    guide.rollback(len(tokens) - half)
    assert guide.text() == b"".join(vocab.token_bytes[t] or b"" for t in tokens[:half]).decode()


# --- soundness ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_random_guided_walks_parse(engine: str, case: Case, request: pytest.FixtureRequest) -> None:
    vocab: Vocabulary = request.getfixturevalue("bytelevel_vocab")
    new_guide, eos_ids, check = guides(engine, "bytelevel", case, request), set(vocab.eos_ids), oracle_of(case)
    rng = np.random.default_rng(20240)
    ended, texts = 0, set()
    for _ in range(WALKS):
        guide = new_guide()
        for _ in range(case.walk_cap):
            allowed = np.flatnonzero(_mask(guide, vocab))
            assert allowed.size, f"empty mask after {guide.text()!r}: every allowed state must be able to finish"
            token = int(rng.choice(allowed))
            if token in eos_ids:
                assert guide.is_accepting(), f"EOS allowed after {guide.text()!r}, which is not a sentence"
                ended += 1
                texts.add(guide.text())
                break
            guide.advance(token)
    wrong = sorted(t for t in texts if not check.accepts(t.encode()))
    assert not wrong, f"{len(wrong)} guided texts lark ({check.mode}) rejects, e.g. {wrong[:3]}"
    assert ended >= case.min_ended * WALKS, f"only {ended} of {WALKS} walks ended within {case.walk_cap} tokens"


# --- exactness on mutations ---------------------------------------------------------------------------------------

_EDITS = st.tuples(st.sampled_from(["insert", "delete", "change"]), st.floats(0.0, 1.0, exclude_max=True),
                   st.integers(0, 127))


def _mutated(sample: bytes, edits: list[tuple[str, float, int]]) -> bytes:
    """`sample` with each edit applied in turn: an ASCII byte inserted, a byte deleted or changed, at a relative
    position (the text stays UTF-8, so lark can judge it)."""
    data = bytearray(sample)
    for op, where, byte in edits:
        at = int(where * (len(data) + (op == "insert")))
        if op == "insert":
            data.insert(at, byte)
        elif data and op == "delete":
            del data[at]
        elif data:
            data[at] = byte
    return bytes(data)


def test_mutations_edit_where_told() -> None:
    assert _mutated(b"abc", [("insert", 0.99, 120)]) == b"abcx"
    assert _mutated(b"abc", [("delete", 0.0, 0), ("change", 0.5, 122)]) == b"bz"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mutations_are_accepted_exactly_when_lark_accepts(
    engine: str, case: Case, request: pytest.FixtureRequest
) -> None:
    new_guide, check = guides(engine, "bytelevel", case, request), oracle_of(case)
    if engine == "llguidance":
        # seen here (llguidance 1.9.1): it refuses %ignore'd whitespace before a sentence's first lexeme, which
        # lark accepts; the reference is kept to the other properties, whose failures would be the harness's
        pytest.skip("llguidance refuses ignored whitespace before the first lexeme (lark accepts it)")

    @settings(max_examples=40)
    @given(st.lists(_EDITS, min_size=1, max_size=2))
    def mutation_agrees(edits: list[tuple[str, float, int]]) -> None:
        data = _mutated(case.sample.encode(), edits)
        guide = new_guide()
        ours = guide.accept_bytes(data) == len(data) and guide.is_accepting()
        assert ours == check.accepts(data), f"{data!r}: guide {ours}, lark ({check.mode}) {not ours}"

    mutation_agrees()


# --- the mask against brute force ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("vocab_name", ["bytelevel", "sentencepiece"])
def test_mask_matches_brute_force_at_sample_prefixes(
    engine: str, vocab_name: str, case: Case, request: pytest.FixtureRequest
) -> None:
    if engine == "llguidance" and vocab_name == "sentencepiece":
        pytest.skip("llguidance leaves <0xNN> byte-fallback tokens out of its mask where a regular token has the "
                    "same byte, though it consumes them")
    vocab: Vocabulary = request.getfixturevalue(f"{vocab_name}_vocab")
    new_guide, eos = guides(engine, vocab_name, case, request), min(vocab.eos_ids)
    tokens = vocab.encode(case.sample)
    rng = np.random.default_rng(len(case.sample))
    for cut in sorted({0, len(tokens), *rng.integers(0, len(tokens), 3).tolist()}):
        guide = new_guide()
        for token in tokens[:cut]:
            guide.advance(token)
        prefix = b"".join(vocab.token_bytes[t] or b"" for t in tokens[:cut])
        mask = _mask(guide, vocab)
        expected = np.zeros(vocab.size, dtype=bool)
        for t, piece in enumerate(vocab.token_bytes):
            if piece:
                expected[t] = new_guide().accept_bytes(prefix + piece) == len(prefix) + len(piece)
        expected[eos] = guide.is_accepting()
        other_eos = [t for t in vocab.eos_ids if t != eos]  # an engine may allow every EOS id or only the one
        expected[other_eos] = mask[other_eos] & guide.is_accepting()
        differ = np.flatnonzero(mask != expected)
        assert not differ.size, (
            f"after {cut} tokens: {differ.size} tokens differ from brute force, e.g. "
            f"{[(int(t), vocab.token_bytes[t], bool(mask[t])) for t in differ[:5]]}"
        )
        assert all(guide.accepts(int(t)) == mask[t] for t in range(vocab.size) if vocab.token_bytes[t]), (
            f"after {cut} tokens: accepts() disagrees with the mask"
        )
