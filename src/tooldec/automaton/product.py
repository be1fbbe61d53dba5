"""Products of DFAs: intersection and difference, for `allOf`, `oneOf`, `not` and pattern-with-length."""

from __future__ import annotations

import numpy as np

from tooldec.automaton.dfa import DEAD, DFA, finish


def _joint_classes(a: DFA, b: DFA) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Byte classes refining both automata's: (class of A, class of B, byte mask) per joint class."""
    pairs: dict[tuple[int, int], int] = {}
    for byte in range(256):
        key = (int(a.classes[byte]), int(b.classes[byte]))
        pairs[key] = pairs.get(key, 0) | (1 << byte)
    ca = np.array([k[0] for k in pairs], dtype=np.int64)
    cb = np.array([k[1] for k in pairs], dtype=np.int64)
    return ca, cb, list(pairs.values())


def _product(a: DFA, b: DFA, *, difference: bool) -> DFA:
    ca, cb, masks = _joint_classes(a, b)
    start = (a.start, b.start)
    ids: dict[tuple[int, int], int] = {start: 1}
    order: list[tuple[int, int]] = [(DEAD, DEAD), start]
    rows: list[list[tuple[int, int]]] = [[], []]
    accepting = [False]
    i = 1
    while i < len(order):
        sa, sb = order[i]
        accepting.append(
            bool(a.accepting[sa]) and (not bool(b.accepting[sb]) if difference else bool(b.accepting[sb]))
        )
        if sa == DEAD or (sb == DEAD and not difference):
            i += 1
            continue
        na = a.trans[sa, ca]
        nb = b.trans[sb, cb]
        by_target: dict[int, int] = {}
        for j, mask in enumerate(masks):
            ta, tb = int(na[j]), int(nb[j])
            if ta == DEAD or (tb == DEAD and not difference):
                continue
            key = (ta, tb)
            tid = ids.get(key)
            if tid is None:
                tid = len(order)
                ids[key] = tid
                order.append(key)
                rows.append([])
            by_target[tid] = by_target.get(tid, 0) | mask
        rows[i] = [(m, t) for t, m in by_target.items()]
        i += 1
    return finish(rows, accepting)


def intersect(a: DFA, b: DFA) -> DFA:
    """The DFA of strings both accept."""
    return _product(a, b, difference=False)


def difference(a: DFA, b: DFA) -> DFA:
    """The DFA of strings `a` accepts and `b` does not."""
    return _product(a, b, difference=True)
