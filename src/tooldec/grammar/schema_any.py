"""Any JSON value (`true`, `{}`, additionalProperties absent or true, arrays without items), nested a bounded
depth for an automaton or as a rule calling itself in the recursive reading."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from tooldec.grammar.ir import EMPTY, Node, Repeat, alt, lit, seq
from tooldec.grammar.numbers import any_number
from tooldec.grammar.schema_base import ANY_RULE, CompilerBase
from tooldec.grammar.strings import string_content

# Any value (`true`, `{}`, additionalProperties absent or true, arrays without items) nests MIN_ANY_DEPTH to
# MAX_ANY_DEPTH containers deep. An automaton must remember, per open container, whether it is an array or an
# object, so each place holding any value costs about ANY_LEVEL_STATES * 2**(depth + 1) states. A schema's places
# share ANY_VALUE_BUDGET states under one nesting limit for the whole document: a place k containers deep holds
# any value nested limit - k deep (within MIN_ANY_DEPTH..MAX_ANY_DEPTH), the limit the largest that fits, so a
# value near the root may nest as deep as one further in. A schema that subtracts (`not`, `oneOf` exclusivity,
# `contains`) takes the difference of such automata with scanners that follow nesting as deep: it shares
# SUBTRACTING_BUDGET (`not: {required: [a, b]}` passes 500,000 DFA states at 9).
MIN_ANY_DEPTH = 3
MAX_ANY_DEPTH = 9
ANY_LEVEL_STATES = 77
ANY_VALUE_BUDGET = 80_000
SUBTRACTING_BUDGET = 20_000


class AnyValues(CompilerBase):
    """Any value: a bounded automaton per nesting depth (kept once per compiler), or one level around calls."""

    any_value_budget: ClassVar[int] = ANY_VALUE_BUDGET
    """States the places holding any value share (see ANY_VALUE_BUDGET)."""

    def _any_level(self) -> Node:
        """Any JSON value, the values inside it calls of the any-value rule."""
        return self._build_any_value(1, self._call(ANY_RULE, True))

    def any_value(self, depth: int) -> Node:
        """Any JSON value nested at most `depth` containers deep."""
        kept = self._any_values.get(depth)
        if kept is None:
            kept = self._any_values[depth] = self._build_any_value(depth)
        return kept

    def _build_any_value(self, depth: int, inner: Node | None = None) -> Node:
        """Any JSON value nested at most `depth` deep, or one level of any value around `inner` values."""
        syn = self.syntax
        scalars = [
            lit(syn.null), lit(syn.true), lit(syn.false), any_number(),
            seq(lit('"'), string_content(python=syn.python), lit('"')),
        ]
        if depth <= 0:
            return alt(*scalars, self._wrap("[", EMPTY, "]"), self._wrap("{", EMPTY, "}"))
        if inner is None:
            inner = self.any_value(depth - 1)
        key = seq(lit('"'), string_content(python=syn.python), lit('"' + syn.key_sep))
        array = self._wrap("[", Repeat(inner, 0, None, self._sep), "]")
        obj = self._wrap("{", Repeat(seq(key, inner), 0, None, self._sep), "}")
        return alt(*scalars, array, obj)


def any_depth_at(limit: int, k: int) -> int:
    """How deep any value nests at a place k containers deep under the nesting limit `limit` (see MIN_ANY_DEPTH)."""
    return max(MIN_ANY_DEPTH, min(MAX_ANY_DEPTH, limit - k))


def nesting_limit(places: list[int], budget: int = ANY_VALUE_BUDGET) -> int:
    """The deepest nesting limit at which places holding any value, at the container depths `places`, fit within
    `budget` states together (see MIN_ANY_DEPTH); 0 without places."""
    if not places:
        return 0
    counts = Counter(places)

    def cost(limit: int) -> int:
        return sum(n * ANY_LEVEL_STATES * 2 ** (any_depth_at(limit, k) + 1) for k, n in counts.items())

    limit = min(counts) + MIN_ANY_DEPTH
    while limit < max(counts) + MAX_ANY_DEPTH and cost(limit + 1) <= budget:
        limit += 1
    return limit
