"""Products of DFAs: intersection and difference, for `allOf`, `oneOf`, `not` and pattern-with-length.

The breadth-first search over state pairs runs in the compiled core; the result is pruned like any DFA.
"""

from __future__ import annotations

import numpy as np

from tooldec import _core
from tooldec.automaton.dfa import DFA, MAX_DFA_STATES, from_core
from tooldec.errors import UnsupportedSchemaError


def _product(a: DFA, b: DFA, *, difference: bool) -> DFA:
    try:
        return from_core(
            _core.product(
                np.ascontiguousarray(a.trans, dtype=np.int32), a.classes, a.accepting, a.start,
                np.ascontiguousarray(b.trans, dtype=np.int32), b.classes, b.accepting, b.start,
                difference, MAX_DFA_STATES,
            )
        )
    except _core.AutomatonTooLarge as exc:
        raise UnsupportedSchemaError("size", detail=str(exc)) from None


def intersect(a: DFA, b: DFA) -> DFA:
    """The DFA of strings both accept."""
    return _product(a, b, difference=False)


def difference(a: DFA, b: DFA) -> DFA:
    """The DFA of strings `a` accepts and `b` does not."""
    return _product(a, b, difference=True)
