"""The token index: for each automaton state, the tokens allowed there and where each leads.

The work is done by the compiled core (`tooldec._core.Index`, algorithm in its source's header): a state's
allowed tokens come from one walk of the vocabulary's preorder token trie through the DFA, pruning a whole
subtree at a dead byte, and are kept as a packed bitmask computed on first visit. This class is the Python face
of it: masks for one state, transitions for tests and analysis, and the batch-fill source of a state.
EOS ids are allowed exactly in accepting states and lead to FINAL.
"""

from __future__ import annotations

import numpy as np

from tooldec import _core
from tooldec.automaton.dfa import DEAD, DFA
from tooldec.index.prepared import PreparedVocab
from tooldec.vocab import Vocabulary

FINAL = _core.FINAL

WARM_PATH = 64
"""How far `warm` follows the start's single path (a call format's opening text is far shorter)."""

EAGER_BUDGET = 1024 * 4096
"""`warm` indexes an automaton whole when its states times its mask words (`int32` words, about a token per 32)
come to at most this: 1,024 states at a 128k-token vocabulary (llama3's 4,008 words), 512 at 256k. What a
state's first visit costs grows with the vocabulary (its masks, the trie it walks) and so does indexing every
state. At this size indexing them all takes about a millisecond of CPU at 128k tokens (FuncQA's 499 states:
0.7-0.9 ms), where lazily the first visits of its numbers' states cost 15-100 us each, inside the steps of a call
(its per-token p99). Larger automata (a few hundred tools: 6,000-17,000 states) stay lazy: indexing them whole
would cost more than their compile, for the few dozen states a call visits. The rule holds for any grammar: it
bounds what indexing everything costs, not which tool set is compiled."""

ALIKE_ROUNDS = 6
"""How many bytes ahead an automaton indexed whole compares its wide states (`_core.Index.share_alike`): a region
walk read at most ALIKE_ROUNDS - 1 bytes deep (a number's digit tokens: 3 bytes at llama3, 1 at qwen2.5) is shared
by the states alike that far instead of found again from each."""


class TokenIndex:
    """State → (allowed token ids, next states), computed per state on first use and then cached (thread-safe)."""

    def __init__(self, dfa: DFA, prepared: PreparedVocab | Vocabulary, *, share_regions: bool = True) -> None:
        """Index `dfa` over a prepared vocabulary (a bare Vocabulary is prepared here, at its cost).

        With `share_regions`, region walks are looked up in and added to the vocabulary's bounded cache, so a
        later tool set with the same kinds of values does not walk the trie for them again."""
        self.prepared = prepared if isinstance(prepared, PreparedVocab) else PreparedVocab(prepared)
        self.dfa = dfa
        self.vocab = self.prepared.vocab
        self.words = self.prepared.words
        self.core = _core.Index(
            self.prepared.core,
            np.ascontiguousarray(dfa.trans, dtype=np.int32),
            dfa.classes,
            dfa.accepting,
            share_regions,
        )
        self.finished: list[bool] = self.core.finished()
        """Per state: accepting with no way on, so only EOS may follow (a list: one lookup per decoding step)."""

    @property
    def start(self) -> int:
        """The start state."""
        return self.dfa.start

    def is_accepting(self, state: int) -> bool:
        """Whether the text so far is a complete call (EOS allowed)."""
        return state > DEAD and bool(self.dfa.accepting[state])

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted allowed token ids in `state` (EOS included when accepting) and the state each leads to.

        Walks the trie afresh (for tests and analysis; decoding uses masks and `next_state`)."""
        if state <= DEAD:
            empty = np.zeros(0, dtype=np.int32)
            return empty, empty
        return self.core.transitions(state)

    def allowed_ids(self, state: int) -> np.ndarray:
        """Sorted token ids allowed in `state`."""
        return np.flatnonzero(self._bits(state)).astype(np.int32)

    def _bits(self, state: int) -> np.ndarray:
        row = self.bitmask(state)
        return np.unpackbits(row.view(np.uint8), bitorder="little").view(bool)[: self.vocab.size]

    def bitmask(self, state: int) -> np.ndarray:
        """Allowed tokens as a new `int32[ceil(V/32)]`: token t is bit `t & 31` of word `t >> 5`."""
        out = np.zeros(self.words, dtype=np.int32)
        self.fill_bitmask(state, out)
        return out

    def fill_bitmask(self, state: int, out: np.ndarray) -> None:
        """Write the packed mask of `state` into the int32 row `out` (DEAD and FINAL allow nothing)."""
        if state == DEAD:
            out.fill(0)
        else:
            self.core.fill(state, out)

    def count(self, state: int) -> int:
        """How many tokens are allowed in `state` (EOS included)."""
        return 0 if state <= DEAD else int(self.core.count(state))

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id` (FINAL after EOS, DEAD if not allowed); walks the token's bytes only."""
        return int(self.core.next_state(state, token_id))

    def warm(self, threads: int = 1, *, whole: bool = False) -> None:
        """Index now, at compile time: a small automaton (EAGER_BUDGET) every state, on this thread; a larger one
        its string regions and the start's opening stretch, on up to `threads` threads; with `whole` every state
        on up to `threads` threads, each region walked on its own (what `pin_regions` keeps).

        A small automaton's steps then only copy masks: its first visits had been the per-token p99 (FuncQA,
        llama3: 24-47 us, a number's states leaving their region), and every state costs about a microsecond
        when they are indexed together (states alike a few bytes ahead share their region's walk,
        `_core.Index.share_alike`; narrow states are one short walk each). In a larger automaton a state reached
        for the first time costs at most its region's exits (tens of microseconds at 128k tokens); a call visits
        a few dozen of its thousands of states, so indexing the rest up front would cost more than the compile
        itself (tools200: 16,438 states)."""
        if self.start <= DEAD:
            return
        if whole:
            self.core.compute_all(threads)
            return
        if self.core.num_states * self.words <= EAGER_BUDGET:
            self.core.share_alike(ALIKE_ROUNDS)
            self.core.compute_all(1)
            return
        self.core.compute_regions(threads)
        # Every call walks the opening stretch from the start (`{"name": "`) to its first choice (the first
        # byte of a tool name): index all of it now. That choice is wide, and no region holds it (a name trie
        # has too many states): over 234 KAMEL tools it took 0.8 ms of the first call's steps, every compile.
        self.core.warm_path(self.start, WARM_PATH)

    def pin_regions(self) -> int:
        """Keep this index's region walks in its vocabulary for every later index over it, never dropped (a
        model's one-time preparation; `Compiler` pins the plain strings and numbers call formats write). Returns
        how many regions this index holds."""
        return int(self.core.pin_regions())

    def reachable_states(self, limit: int | None = None) -> list[int]:
        """States reachable from the start by allowed tokens (breadth first), each with its mask computed."""
        seen = {self.start}
        queue = [self.start]
        i = 0
        while i < len(queue) and (limit is None or len(queue) < limit):
            self.core.count(queue[i])
            _, nxt = self.transitions(queue[i])
            for s in np.unique(nxt).tolist():
                if s != FINAL and s not in seen:
                    seen.add(s)
                    queue.append(s)
            i += 1
        return queue
