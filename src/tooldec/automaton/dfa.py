"""The byte-level DFA as arrays: subset construction from the NFA, pruning of states that cannot finish.

State 0 is the dead state (every transition of it leads back to 0); the start state is 1. Transitions are
`int32[states, classes]` with a `uint8[256]` byte-class map, so a byte b moves s to `trans[s, classes[b]]`.
After pruning, every live state can still reach an accepting state: "allowed" always means "can finish".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tooldec.automaton.nfa import NFA
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


class _Closures:
    """Epsilon closures of NFA states, memoised."""

    def __init__(self, nfa: NFA) -> None:
        self.nfa = nfa
        self.memo: dict[int, frozenset[int]] = {}

    def of(self, state: int) -> frozenset[int]:
        got = self.memo.get(state)
        if got is not None:
            return got
        eps = self.nfa.eps
        seen = {state}
        stack = [state]
        while stack:
            s = stack.pop()
            for t in eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        # keep only states that matter to the DFA: those with byte edges, or the accept state
        edges, accept = self.nfa.edges, self.nfa.accept
        result = frozenset(s for s in seen if edges[s] or s == accept)
        self.memo[state] = result
        return result


def _partition(grouped: dict[int, set[int]]) -> list[tuple[int, frozenset[int]]]:
    """Split overlapping byte masks into disjoint atoms, each with the union of targets it reaches."""
    parts: list[tuple[int, frozenset[int]]] = []
    for mask, targets in grouped.items():
        tg = frozenset(targets)
        rest = mask
        new_parts: list[tuple[int, frozenset[int]]] = []
        for pm, ptg in parts:
            inter = pm & mask
            if inter:
                new_parts.append((inter, ptg | tg))
                outside = pm & ~mask
                if outside:
                    new_parts.append((outside, ptg))
                rest &= ~pm
            else:
                new_parts.append((pm, ptg))
        if rest:
            new_parts.append((rest, tg))
        parts = new_parts
    return parts


def _byte_classes(masks: set[int]) -> np.ndarray:
    """The coarsest partition of bytes that every mask is a union of."""
    cls = np.zeros(256, dtype=np.int64)
    bit_index = np.arange(256)
    for m in masks:
        bits = np.frombuffer(m.to_bytes(32, "little"), dtype=np.uint8)
        member = np.unpackbits(bits, bitorder="little")[bit_index].astype(np.int64)
        _, cls = np.unique(cls * 2 + member, return_inverse=True)
    return cls.astype(np.uint8)


def determinize(nfa: NFA) -> DFA:
    """Subset construction over byte masks, then pruning of states that cannot reach acceptance."""
    closures = _Closures(nfa)
    start_set = closures.of(nfa.start)
    ids: dict[frozenset[int], int] = {start_set: 1}
    order: list[frozenset[int]] = [frozenset(), start_set]
    rows: list[list[tuple[int, int]]] = [[], []]
    i = 1
    edges = nfa.edges
    while i < len(order):
        current = order[i]
        grouped: dict[int, set[int]] = {}
        for s in current:
            for mask, target in edges[s]:
                grouped.setdefault(mask, set()).add(target)
        by_target: dict[int, int] = {}
        for mask, targets in _partition(grouped) if len(grouped) > 1 else grouped.items():
            if len(targets) == 1:
                key = closures.of(next(iter(targets)))  # a literal step: no union to build
            else:
                union: set[int] = set()
                for t in targets:
                    union |= closures.of(t)
                key = frozenset(union)
            tid = ids.get(key)
            if tid is None:
                tid = len(order)
                if tid >= MAX_DFA_STATES:
                    raise UnsupportedSchemaError(
                        "size", detail=f"the automaton would exceed {MAX_DFA_STATES} DFA states"
                    )
                ids[key] = tid
                order.append(key)
                rows.append([])
            by_target[tid] = by_target.get(tid, 0) | mask
        rows[i] = [(m, t) for t, m in by_target.items()]
        i += 1
    accepting = [nfa.accept in st for st in order]
    return finish(rows, accepting)


def finish(rows: list[list[tuple[int, int]]], accepting: list[bool]) -> DFA:
    """Prune states that cannot reach acceptance, renumber (dead 0, start 1) and lay out the arrays."""
    n = len(rows)
    reverse: list[list[int]] = [[] for _ in range(n)]
    for s, row in enumerate(rows):
        for _, t in row:
            reverse[t].append(s)
    alive = [False] * n
    stack = [s for s in range(n) if accepting[s]]
    for s in stack:
        alive[s] = True
    while stack:
        s = stack.pop()
        for p in reverse[s]:
            if not alive[p]:
                alive[p] = True
                stack.append(p)
    alive[DEAD] = False
    new_id = [0] * n
    count = 1
    if n > 1 and alive[1]:
        for s in range(1, n):
            if alive[s]:
                new_id[s] = count
                count += 1
    masks = {m for s in range(n) if alive[s] for m, t in rows[s] if alive[t]}
    classes = _byte_classes(masks) if masks else np.zeros(256, dtype=np.uint8)
    n_classes = int(classes.max()) + 1
    rep = np.zeros(n_classes, dtype=np.int64)
    for b in range(255, -1, -1):
        rep[classes[b]] = b
    rep_list = rep.tolist()
    mask_classes: dict[int, list[int]] = {}
    cells: list[int] = []  # flat index state * n_classes + class
    targets: list[int] = []
    acc = np.zeros(count, dtype=bool)
    acc_ids = []
    for s in range(1, n):
        if not alive[s]:
            continue
        ns = new_id[s]
        if accepting[s]:
            acc_ids.append(ns)
        base = ns * n_classes
        for m, t in rows[s]:
            if not alive[t]:
                continue
            cl = mask_classes.get(m)
            if cl is None:
                cl = mask_classes[m] = [c for c in range(n_classes) if (m >> rep_list[c]) & 1]
            nt = new_id[t]
            for c in cl:
                cells.append(base + c)
                targets.append(nt)
    acc[acc_ids] = True
    trans = np.zeros(count * n_classes, dtype=np.int32)
    trans[cells] = targets
    trans = trans.reshape(count, n_classes)
    return DFA(trans=trans, classes=classes, accepting=acc, start=1 if count > 1 else DEAD)
