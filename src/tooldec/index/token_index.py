"""The token index (Outlines, seed 003): for each automaton state, the tokens allowed there and where each leads.

A state's entry is computed on first visit by walking every token's bytes through the DFA at once (numpy,
tokens sorted by length so a column step touches only tokens still alive and long enough, and a dead first
byte prunes a token immediately), then cached: every later visit is a dictionary lookup. EOS ids are allowed
exactly in accepting states and lead to FINAL.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from tooldec.automaton.dfa import DEAD, DFA
from tooldec.vocab import Vocabulary

FINAL = -1


@dataclass(frozen=True)
class _VocabArrays:
    """A vocabulary's token bytes flattened, tokens ordered by decreasing length (built once per vocabulary)."""

    order: np.ndarray  # int64 token ids, longest first
    neg_lens: np.ndarray  # minus the lengths in that order (ascending), for searchsorted
    flat: np.ndarray  # uint8 bytes of the tokens in that order
    offsets: np.ndarray  # int64 start of each token in flat


_VOCAB_ARRAYS: weakref.WeakKeyDictionary[Vocabulary, _VocabArrays] = weakref.WeakKeyDictionary()


def vocab_arrays(vocab: Vocabulary) -> _VocabArrays:
    """The flattened arrays of a vocabulary, cached for the vocabulary's lifetime."""
    got = _VOCAB_ARRAYS.get(vocab)
    if got is not None:
        return got
    ids = [i for i, b in enumerate(vocab.token_bytes) if b]
    lens = np.array([len(vocab.token_bytes[i]) for i in ids], dtype=np.int64)  # type: ignore[arg-type]
    perm = np.argsort(-lens, kind="stable")
    order = np.array(ids, dtype=np.int64)[perm]
    lens = lens[perm]
    flat = np.frombuffer(b"".join(vocab.token_bytes[i] for i in order.tolist()), dtype=np.uint8)  # type: ignore[misc]
    offsets = np.zeros(len(order), dtype=np.int64)
    if len(order) > 1:
        offsets[1:] = np.cumsum(lens)[:-1]
    arrays = _VocabArrays(order=order, neg_lens=-lens, flat=flat, offsets=offsets)
    _VOCAB_ARRAYS[vocab] = arrays
    return arrays


class TokenIndex:
    """State → (allowed token ids, next states), computed per state on first use and then cached."""

    def __init__(self, dfa: DFA, vocab: Vocabulary) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self._arrays = vocab_arrays(vocab)
        self._flat_cls = dfa.classes[self._arrays.flat]
        self._first_cls = self._flat_cls[self._arrays.offsets] if len(self._arrays.offsets) else self._flat_cls
        self._eos = np.array(sorted(vocab.eos_ids), dtype=np.int64)
        self._entries: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._bitmasks: dict[int, np.ndarray] = {}
        self.words = (vocab.size + 31) // 32

    @property
    def start(self) -> int:
        """The start state."""
        return self.dfa.start

    def is_accepting(self, state: int) -> bool:
        """Whether the text so far is a complete call (EOS allowed)."""
        return state != FINAL and bool(self.dfa.accepting[state])

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted allowed token ids in `state` (EOS included when accepting) and the state each leads to."""
        got = self._entries.get(state)
        if got is None:
            got = self._compute(state)
            self._entries[state] = got
        return got

    def allowed_ids(self, state: int) -> np.ndarray:
        """Sorted token ids allowed in `state`."""
        return self.transitions(state)[0]

    def bitmask(self, state: int) -> np.ndarray:
        """Allowed tokens as `int32[ceil(V/32)]`: token t is bit `t & 31` of word `t >> 5`."""
        got = self._bitmasks.get(state)
        if got is None:
            bits = np.zeros(self.words * 32, dtype=bool)
            bits[self.transitions(state)[0]] = True
            got = np.packbits(bits, bitorder="little").view("<i4")
            got.flags.writeable = False
            self._bitmasks[state] = got
        return got

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id` (FINAL after EOS, DEAD if not allowed); walks the token's bytes only."""
        if state in (DEAD, FINAL):
            return DEAD
        if token_id in self.vocab.eos_ids:
            return FINAL if self.dfa.accepting[state] else DEAD
        if not 0 <= token_id < len(self.vocab.token_bytes):
            return DEAD
        data = self.vocab.token_bytes[token_id]
        if not data:
            return DEAD
        return self.dfa.step(state, data)

    def _compute(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        a = self._arrays
        trans = self.dfa.trans
        if state in (DEAD, FINAL):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        live = trans[state] != DEAD
        rows = np.flatnonzero(live[self._first_cls])
        cur = trans[state, self._first_cls[rows]]
        done_rows: list[np.ndarray] = []
        done_next: list[np.ndarray] = []
        j = 1
        while rows.size:
            k = int(np.searchsorted(a.neg_lens[rows], -j, side="left"))
            if k < rows.size:
                done_rows.append(rows[k:])
                done_next.append(cur[k:])
                rows, cur = rows[:k], cur[:k]
            if not k:
                break
            cur = trans[cur, self._flat_cls[a.offsets[rows] + j]]
            keep = cur != DEAD
            if not keep.all():
                rows, cur = rows[keep], cur[keep]
            j += 1
        ids = a.order[np.concatenate(done_rows)] if done_rows else np.zeros(0, dtype=np.int64)
        nxt = np.concatenate(done_next).astype(np.int32) if done_next else np.zeros(0, dtype=np.int32)
        if self.dfa.accepting[state] and self._eos.size:
            ids = np.concatenate([ids, self._eos])
            nxt = np.concatenate([nxt, np.full(self._eos.size, FINAL, dtype=np.int32)])
        perm = np.argsort(ids, kind="stable")
        return ids[perm], nxt[perm]

    def reachable_states(self, limit: int | None = None) -> list[int]:
        """States reachable from the start by allowed tokens (breadth first), computing their entries."""
        seen = {self.start}
        queue = [self.start]
        i = 0
        while i < len(queue) and (limit is None or len(queue) < limit):
            _, nxt = self.transitions(queue[i])
            for s in np.unique(nxt).tolist():
                if s != FINAL and s not in seen:
                    seen.add(s)
                    queue.append(s)
            i += 1
        return queue
