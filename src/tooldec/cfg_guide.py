"""Context-free grammars compiled against a vocabulary, and the guide of one sequence over them.

`compile_cfg` turns a normalized grammar (`tooldec.grammar.cfg`) into the core's pushdown guide: each terminal
becomes a byte DFA (the automaton layer), the rules go to the core's Earley parser. `CfgGuide` has the verbs of
the DFA `Guide` (mask, advance, rollback, fork, forced bytes), so decoders, the logits processor, the server and
vLLM take a grammar as they take a tool set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import Any

import numpy as np

from tooldec import _core
from tooldec.automaton.compile import compile_arrays
from tooldec.automaton.dfa import MAX_DFA_STATES
from tooldec.automaton.forced import complete_utf8
from tooldec.errors import GrammarError, TokenRejectedError
from tooldec.grammar.cfg import ContextFreeGrammar
from tooldec.grammar.ir import Bytes, Node, Seq
from tooldec.guide import BitmaskRows
from tooldec.index import PreparedVocab, unpack

MAX_EARLEY_ITEMS = 1_000_000
"""Items one Earley set may hold before the guide refuses to go on (a grammar too ambiguous for its input)."""
FORCED_LIMIT = 256
"""Bytes at most that `forced_bytes` looks ahead."""
PARALLEL_TERMINALS = 4096
"""Size of the terminals' IR node table (code entries) from which their automata are built on several threads:
a Lark grammar's dozens of small lexemes (SQL's 32: 421 entries) build in 0.2 ms on one thread, and twice the
CPU time on two."""


_ROWS = {1 << b: (1 << b).to_bytes(32, "little") for b in range(256)}
"""The chain row of each one-byte set (a literal's bytes), made once."""


def _chain(node: Node) -> bytes | None:
    """A terminal that is a sequence of byte sets (a literal, one character) as the core's chain rows (32 bytes a
    set), whose DFA the core builds without an NFA; None for any other node."""
    items = node.items if type(node) is Seq else (node,)  # type: ignore[union-attr]
    if not items or len(items) + 2 > MAX_DFA_STATES:
        return None  # past MAX_DFA_STATES: refused by compile_arrays, with its message
    rows = []
    for item in items:
        if type(item) is not Bytes:
            return None
        rows.append(_ROWS.get(item.mask) or item.mask.to_bytes(32, "little"))  # type: ignore[union-attr]
    return b"".join(rows)


def compile_cfg(grammar: ContextFreeGrammar, prepared: PreparedVocab, threads: int = 1) -> Any:
    """The core's compiled grammar (`_core.CfgGrammar`) of `grammar` over a prepared vocabulary.

    Raises GrammarError when a terminal cannot be guided (its automaton too large) or the rules are refused."""
    given = [t.automaton if t.automaton is not None else _chain(t.node) for t in grammar.terminals]
    written = [t.node for t, got in zip(grammar.terminals, given) if got is None]
    try:
        dfas = iter(compile_arrays(written, threads=threads, parallel_from=PARALLEL_TERMINALS) if written else [])
    except _core.AutomatonTooLarge as exc:
        raise GrammarError(f"a terminal's automaton is too large: {exc}") from None
    terminals = [got if got is not None else next(dfas) for got in given]
    lhs, rhss = zip(*grammar.rules) if grammar.rules else ((), ())
    ptr = np.fromiter(accumulate(map(len, rhss), initial=0), dtype=np.int64, count=len(rhss) + 1)
    rhs = np.fromiter(chain.from_iterable(rhss), dtype=np.int32)
    try:
        return _core.CfgGrammar(
            prepared.core,
            terminals,
            np.array([t.priority for t in grammar.terminals], dtype=np.int32),
            np.array([t.literal for t in grammar.terminals], dtype=bool),
            np.array(grammar.ignore, dtype=np.int32),
            len(grammar.nonterminals),
            np.array(lhs, dtype=np.int32),
            ptr,
            rhs,
            grammar.start,
            use_priorities=grammar.priorities,
            max_items=MAX_EARLEY_ITEMS,
        )
    except ValueError as exc:
        raise GrammarError(str(exc)) from None


@dataclass
class CompiledCfg:
    """A context-free grammar compiled against one vocabulary: make a guide per sequence from it."""

    core: Any
    grammar: ContextFreeGrammar
    prepared: PreparedVocab
    parse: Callable[[str], Any] | None = None
    format: Any = None
    """The call format of a grammar of calls (custom tools', `Compiler.compile_custom_calls`); None where the whole
    guided text is one sentence of the grammar."""
    tools: Any = None

    def guide(self) -> CfgGuide:
        """A fresh guide at the start of the text."""
        return CfgGuide(self)


class CfgGuide:
    """One sequence's position in a context-free grammar (the lexeme in progress and the parse before it)."""

    def __init__(self, compiled: CompiledCfg, matcher: Any = None) -> None:
        self.compiled = compiled
        self.vocab = compiled.prepared.vocab
        self._m = matcher if matcher is not None else _core.CfgMatcher(compiled.core)
        self._tokens: list[int] = []
        self._raw: list[bytes] = []  # the bytes of each accept_bytes step (a -1 in _tokens), in order
        self._rows = BitmaskRows(compiled.prepared.words)

    @property
    def matcher(self) -> Any:
        """The core's matcher (`_core.CfgMatcher`): also a row source of the batch fill."""
        return self._m

    @property
    def tokens(self) -> list[int]:
        """Token ids accepted so far (EOS included; -1 for a step of raw bytes)."""
        return list(self._tokens)

    @property
    def num_tokens(self) -> int:
        """How many tokens were accepted so far (EOS included)."""
        return len(self._tokens)

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete sentence, so EOS may come now."""
        return bool(self._m.can_end())

    def is_finished(self) -> bool:
        """Whether EOS was accepted, or nothing but EOS can follow."""
        return bool(self._m.is_finished())

    def bitmask(self) -> np.ndarray:
        """Allowed tokens packed as a new `int32[ceil(V/32)]`, bit `t & 31` of word `t >> 5`."""
        out = np.zeros((1, self.compiled.prepared.words), dtype=np.int32)
        self._m.fill(out, 0)
        return out[0]

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted ids of the tokens allowed next."""
        return np.flatnonzero(unpack(self.bitmask(), self.vocab.size))

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None:
        """Write the packed mask into row `row` of an `int32[batch, ceil(V/32)]` array (see BitmaskRows)."""
        self._m.fill_at(self._rows.address(out, row))

    def mask_source(self) -> Any:
        """This sequence as a row source of the compiled batch fill (`tooldec.decoding.fill_bitmasks`)."""
        return self._m

    def accepts(self, token_id: int) -> bool:
        """Whether `token_id` is allowed now."""
        return bool(self._m.accepts(token_id))

    def advance(self, token_id: int) -> None:
        """Consume one token; raises TokenRejectedError if it is not allowed."""
        if not self._m.accept_token(token_id):
            tb = self.vocab.token_bytes
            text = tb[token_id] if 0 <= token_id < len(tb) else None
            raise TokenRejectedError(token_id, -1, text)
        self._tokens.append(token_id)

    def accept_bytes(self, data: bytes) -> int:
        """Take raw bytes as one step; returns how many are accepted before the first that is not (the guide
        moves only when all are: then `rollback(1)` undoes them)."""
        n = int(self._m.accept_bytes(data))
        if n == len(data):
            self._tokens.append(-1)
            self._raw.append(data)
        return n

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` steps (tokens, or one `accept_bytes`)."""
        if n < 0 or n > len(self._tokens):
            raise ValueError(f"cannot roll back {n} tokens of {len(self._tokens)}")
        if n:
            self._m.rollback(n)
            raw = self._tokens[-n:].count(-1)
            if raw:
                del self._raw[-raw:]
            del self._tokens[-n:]

    def fork(self) -> CfgGuide:
        """An independent copy at the same position."""
        g = CfgGuide(self.compiled, self._m.fork())
        g._tokens = list(self._tokens)
        g._raw = list(self._raw)
        return g

    def runs_on(self, token_id: int) -> bool:
        """Whether a longer token that starts with `token_id`'s bytes is allowed now."""
        return bool(self._m.runs_on(token_id))

    def forced_bytes(self) -> bytes:
        """The bytes that must come next whatever the model says (whole UTF-8 characters only)."""
        return complete_utf8(self._m.forced_bytes(FORCED_LIMIT))

    def distance(self) -> int:
        """Fewest bytes from here to a complete sentence (0 when it may end now)."""
        return int(self._m.distance())

    def text(self) -> str:
        """The text generated so far (EOS excluded)."""
        tb, eos, raw = self.vocab.token_bytes, self.vocab.eos_ids, iter(self._raw)
        chunks = (next(raw) if t < 0 else b"" if t in eos else tb[t] or b"" for t in self._tokens)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def result(self) -> Any:
        """The sentence (parsed by the compiled grammar's `parse`, if any); raises ValueError before it is
        complete."""
        if not (self.is_accepting() or self._m.is_terminated()):
            raise ValueError("the text is not a complete sentence yet")
        return self.text() if self.compiled.parse is None else self.compiled.parse(self.text())
