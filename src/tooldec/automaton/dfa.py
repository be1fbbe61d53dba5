"""The byte-level DFA as arrays, as the compiled core builds it (pruned: states that cannot finish are removed).

State 0 is the dead state (every transition of it leads back to 0); the start state is 1. Transitions are
`int32[states, classes]` with a `uint8[256]` byte-class map, so a byte b moves s to `trans[s, classes[b]]`.
After pruning, every live state can still reach an accepting state: "allowed" always means "can finish".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tooldec import _core
from tooldec.errors import UnsupportedSchemaError

DEAD = 0
MAX_DFA_STATES = 500_000


@dataclass(frozen=True)
class DFA:
    """A pruned deterministic byte automaton (see module docstring for the layout)."""

    trans: np.ndarray  # int32[n_states, n_classes]
    classes: np.ndarray  # uint8[256]
    accepting: np.ndarray  # bool[n_states]
    start: int

    @property
    def num_states(self) -> int:
        """Number of states, the dead state included."""
        return int(self.trans.shape[0])

    def step(self, state: int, data: bytes) -> int:
        """The state after reading `data` from `state` (DEAD if it is rejected on the way)."""
        trans, classes = self.trans, self.classes
        for b in data:
            state = int(trans[state, classes[b]])
            if state == DEAD:
                return DEAD
        return state

    def accepts(self, data: bytes) -> bool:
        """Whether the whole of `data` is in the language."""
        return bool(self.accepting[self.step(self.start, data)])


def minimize(dfa: DFA) -> DFA:
    """The minimal DFA of the same language (Hopcroft, in the compiled core): equivalent states merged, dead
    state 0, start 1, the rest breadth first. A union of tools keeps each tool's tail apart even where the tails
    are alike; merged, the token index has fewer states to walk and store."""
    return from_core(_core.minimize_dfa(dfa.trans, dfa.classes, dfa.accepting, dfa.start))


def separated_run(dfa: DFA, between: Sequence[bytes]) -> DFA | None:
    """The DFA of one or more of `dfa`'s strings, each after the first following one of `between`: its accepting
    states lead back to its start through the separators' trie, one state per inner node (Thompson's
    construction of such a repeat builds `dfa` twice, and its determinized run keeps both). None where that
    would not be the language: an accepting state that goes on, separators of which one begins another, or
    more than 256 byte classes."""
    seps = sorted(set(between))
    if not seps or not all(seps) or any(a != b and b.startswith(a) for a in seps for b in seps):
        return None
    trans, accepting = np.asarray(dfa.trans), np.asarray(dfa.accepting, dtype=bool)
    if (trans[accepting] != DEAD).any():
        return None
    classes = dfa.classes.astype(np.int64)
    columns = list(range(trans.shape[1]))  # the old column each new class copies
    for byte in sorted({b for sep in seps for b in sep}):  # each separator byte a class of its own
        columns.append(int(classes[byte]))
        classes[byte] = len(columns) - 1
    if len(columns) > 256:
        return None
    inner = sorted({sep[:k] for sep in seps for k in range(1, len(sep))})
    node = {prefix: len(trans) + i for i, prefix in enumerate(inner)}
    out = np.zeros((len(trans) + len(inner), len(columns)), dtype=np.int32)
    out[: len(trans)] = trans[:, columns]
    ends = np.flatnonzero(accepting)
    for sep in seps:
        for k, byte in enumerate(sep):
            target = dfa.start if k == len(sep) - 1 else node[sep[: k + 1]]
            out[ends if k == 0 else node[sep[:k]], classes[byte]] = target
    return DFA(out, classes.astype(np.uint8), np.concatenate([accepting, np.zeros(len(inner), dtype=bool)]), dfa.start)


def from_core(arrays: tuple[np.ndarray, np.ndarray, np.ndarray, int]) -> DFA:
    """A DFA from the compiled core's (trans, classes, accepting, start), its arrays read-only (a token index
    reads the transitions in place)."""
    trans, classes, accepting, start = arrays
    for array in (trans, classes, accepting):
        array.flags.writeable = False
    return DFA(trans=trans, classes=classes, accepting=accepting, start=int(start))


def union_dfas(dfas: list[DFA]) -> DFA:
    """The DFA of strings any of `dfas` accepts (in the compiled core; one automaton is returned as it is).
    Raises ValueError for no automata."""
    if not dfas:
        raise ValueError("the union of no automata")
    if len(dfas) == 1:
        return dfas[0]
    parts = [(np.ascontiguousarray(d.trans, dtype=np.int32), d.classes, d.accepting, d.start) for d in dfas]
    try:
        return from_core(_core.union_dfas(parts, MAX_DFA_STATES))
    except _core.AutomatonTooLarge as exc:
        raise UnsupportedSchemaError("size", detail=str(exc)) from None
