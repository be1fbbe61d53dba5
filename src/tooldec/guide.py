"""The guide: the per-sequence runtime over a token index (current state, mask, advance, result).

Mask and advance never scan the vocabulary: a mask is the cached entry of the current state; advancing walks
the bytes of one token through the DFA. Rollback and fork support jump-forward and beam search.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from tooldec.automaton.dfa import DEAD
from tooldec.automaton.forced import ForcedText, complete_utf8
from tooldec.errors import TokenRejectedError
from tooldec.index.token_index import FINAL, TokenIndex


class BitmaskRows:
    """Where to write rows of a caller's `int32[batch, words]` bitmask: the array is checked once and then written
    through its data pointer (reading a numpy array's pointer or converting it for the core took longer than the
    16 KB copy of a step's mask). Keeps the last array alive with its pointer."""

    def __init__(self, words: int) -> None:
        self.words = words
        self._out: np.ndarray | None = None
        self._at = self._rows = 0

    def address(self, out: np.ndarray, row: int) -> int:
        """The data pointer of row `row` of `out`; ValueError for an array of the wrong kind, IndexError for a row
        outside it."""
        if out is not self._out:
            if out.dtype != np.int32 or out.ndim != 2 or out.shape[1] != self.words or not out.flags.c_contiguous:
                raise ValueError(f"the bitmask must be a C-contiguous int32[batch, {self.words}] array")
            if not out.flags.writeable:
                raise ValueError("the bitmask is read-only")
            self._out, self._at, self._rows = out, out.ctypes.data, out.shape[0]
        if not 0 <= row < self._rows:
            raise IndexError(f"row {row} is not in a bitmask of {self._rows} rows")
        return self._at + row * self.words * 4


_RUN_ON: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], bool]] = weakref.WeakKeyDictionary()


class Guide:
    """One sequence's position in a tool-call grammar."""

    def __init__(
        self, index: TokenIndex, parse: Callable[[str], Any] | None = None, forced: ForcedText | None = None
    ) -> None:
        self.index = index
        self._forced = forced
        self._core = index.core
        self._finished = index.finished
        self._parse = parse
        self._states: list[int] = [index.start]
        self._tokens: list[int] = []
        self._rows = BitmaskRows(index.words)

    @property
    def state(self) -> int:
        """The current automaton state (FINAL once EOS was accepted)."""
        return self._states[-1]

    @property
    def tokens(self) -> list[int]:
        """Token ids accepted so far (EOS included)."""
        return list(self._tokens)

    @property
    def num_tokens(self) -> int:
        """How many tokens were accepted so far (EOS included), without copying them."""
        return len(self._tokens)

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete call, so EOS may come now."""
        return self.index.is_accepting(self.state)

    def is_finished(self) -> bool:
        """Whether EOS was accepted, or nothing but EOS can follow."""
        s = self._states[-1]
        return s == FINAL or (s > DEAD and self._finished[s])

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted ids of the tokens allowed next."""
        return self.index.allowed_ids(self.state)

    def bitmask(self) -> np.ndarray:
        """Allowed tokens packed as a new `int32[ceil(V/32)]`, bit `t & 31` of word `t >> 5`."""
        return self.index.bitmask(self.state)

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None:
        """Write the packed mask into row `row` of an `int32[batch, ceil(V/32)]` array (see BitmaskRows)."""
        self._core.fill_at(self._states[-1], self._rows.address(out, row))

    def mask_source(self) -> tuple[Any, int]:
        """The current state as a row source of the compiled batch fill (`tooldec.decoding.fill_bitmasks`)."""
        return (self._core, self._states[-1])

    def accepts(self, token_id: int) -> bool:
        """Whether `token_id` is allowed now."""
        return self.index.next_state(self.state, token_id) != DEAD

    def advance(self, token_id: int) -> int:
        """Consume one token and return the new state; raises TokenRejectedError if it is not allowed."""
        nxt = self._core.next_state(self._states[-1], token_id)
        if nxt == DEAD:
            tb = self.index.vocab.token_bytes
            text = tb[token_id] if 0 <= token_id < len(tb) else None
            raise TokenRejectedError(token_id, self.state, text)
        self._states.append(nxt)
        self._tokens.append(token_id)
        return nxt

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` tokens."""
        if n < 0 or n > len(self._tokens):
            raise ValueError(f"cannot roll back {n} tokens of {len(self._tokens)}")
        if n:
            del self._states[-n:]
            del self._tokens[-n:]

    def fork(self) -> Guide:
        """An independent copy at the same position."""
        g = Guide(self.index, self._parse, self._forced)
        g._states = list(self._states)
        g._tokens = list(self._tokens)
        return g

    def runs_on(self, token_id: int) -> bool:
        """Whether a longer token that starts with `token_id`'s bytes is allowed now (cached per index).

        Then a forced stretch stops before the token: the model writes the stretch's end merged with what
        follows, as it would unguided (`<m` `ilitary` rather than a forced `<` it rarely saw before `military`)."""
        cache = _RUN_ON.setdefault(self.index, {})
        state = self._states[-1]
        got = cache.get((state, token_id))
        if got is None:
            tb = self.index.vocab.token_bytes
            head = tb[token_id] or b""
            got = cache[(state, token_id)] = any(
                len(b) > len(head) and b.startswith(head) for t in self.index.allowed_ids(state) if (b := tb[t])
            )
        return got

    def forced_bytes(self) -> bytes:
        """The bytes that must come next whatever the model says (whole UTF-8 characters only)."""
        if self._forced is None or self.state == FINAL:
            return b""
        return complete_utf8(self._forced.after(self.state))

    def text(self) -> str:
        """The text generated so far (EOS excluded)."""
        tb = self.index.vocab.token_bytes
        eos = self.index.vocab.eos_ids
        return b"".join(tb[t] or b"" for t in self._tokens if t not in eos).decode("utf-8", errors="replace")

    def result(self) -> Any:
        """The parsed call; raises ValueError before the call is complete."""
        if not (self.state == FINAL or self.is_accepting()):
            raise ValueError("the call is not complete yet")
        if self._parse is None:
            return self.text()
        return self._parse(self.text())
