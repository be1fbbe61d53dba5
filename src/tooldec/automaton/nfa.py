"""Thompson construction: a grammar IR node becomes a byte NFA with epsilon moves.

Invariant of `_Builder.build(node, start)`: it may add edges *out of* `start` but never *into* it, so
alternatives can share their entry state and loops always get a fresh state of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Alt, Bytes, Difference, Fields, Intersect, Node, Repeat, Seq


class DenseAutomaton(Protocol):
    """What the builder needs of a DFA to copy it in: the array layout of `tooldec.automaton.dfa.DFA`."""

    trans: Any
    classes: Any
    accepting: Any
    start: int

    @property
    def num_states(self) -> int:
        """Number of states, the dead state 0 included."""


MAX_NFA_STATES = 2_000_000


@dataclass
class NFA:
    """A byte NFA: `edges[s]` lists (byte mask, target), `eps[s]` lists epsilon targets; one accept state."""

    edges: list[list[tuple[int, int]]] = field(default_factory=list)
    eps: list[list[int]] = field(default_factory=list)
    start: int = 0
    accept: int = 0

    def new_state(self) -> int:
        """Add a state and return its number; refuses to grow past MAX_NFA_STATES."""
        if len(self.edges) >= MAX_NFA_STATES:
            raise UnsupportedSchemaError(
                "size", detail=f"the automaton would exceed {MAX_NFA_STATES} NFA states"
            )
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1


class _Builder:
    def __init__(self, product: Callable[[Intersect | Difference], DenseAutomaton]) -> None:
        self.nfa = NFA()
        self.product = product

    def build(self, node: Node, start: int) -> int:
        nfa = self.nfa
        if isinstance(node, Bytes):
            end = nfa.new_state()
            if node.mask:
                nfa.edges[start].append((node.mask, end))
            return end
        if isinstance(node, Seq):
            cur = start
            for item in node.items:
                cur = self.build(item, cur)
            if cur == start:
                cur = nfa.new_state()
                nfa.eps[start].append(cur)
            return cur
        if isinstance(node, Alt):
            end = nfa.new_state()
            for item in node.items:
                nfa.eps[self.build(item, start)].append(end)
            return end
        if isinstance(node, Repeat):
            return self._repeat(node, start)
        if isinstance(node, Fields):
            return self._fields(node, start)
        if isinstance(node, (Intersect, Difference)):
            return self._embed(self.product(node), start)
        raise TypeError(f"not a grammar node: {node!r}")

    def _repeat(self, node: Repeat, start: int) -> int:
        nfa = self.nfa
        item, sep = node.item, node.sep
        cur = start
        for i in range(node.min):
            if i and sep is not None:
                cur = self.build(sep, cur)
            cur = self.build(item, cur)
        if node.max is None:
            loop = nfa.new_state()
            nfa.eps[cur].append(loop)
            if node.min == 0 and sep is not None:
                # zero items, or item (sep item)*, with one copy of item
                end = nfa.new_state()
                nfa.eps[loop].append(end)
                entry = nfa.new_state()
                nfa.eps[loop].append(entry)
                after = self.build(item, entry)
                nfa.eps[after].append(end)
                nfa.eps[self.build(sep, after)].append(entry)
                return end
            body = self.build(sep, loop) if (sep is not None) else loop
            nfa.eps[self.build(item, body)].append(loop)
            return loop
        if node.max < node.min:
            raise ValueError(f"repeat bounds {node.min}..{node.max}")
        end = nfa.new_state()
        nfa.eps[cur].append(end)
        for i in range(node.min, node.max):
            if i and sep is not None:
                cur = self.build(sep, cur)
            cur = self.build(item, cur)
            nfa.eps[cur].append(end)
        return end

    def _fields(self, node: Fields, start: int) -> int:
        nfa = self.nfa
        first: int | None = start  # nothing emitted yet
        more: int | None = None  # at least one field emitted
        for item, required in node.items:
            entry = nfa.new_state()
            if first is not None:
                nfa.eps[first].append(entry)
            if more is not None:
                nfa.eps[self.build(node.sep, more)].append(entry)
            after = self.build(item, entry)
            nxt_more = nfa.new_state()
            nfa.eps[after].append(nxt_more)
            if not required and more is not None:
                nfa.eps[more].append(nxt_more)
            if not required and first is not None:
                nxt_first = nfa.new_state()
                nfa.eps[first].append(nxt_first)
                first = nxt_first
            else:
                first = None
            more = nxt_more
        end = nfa.new_state()
        if first is not None:
            nfa.eps[first].append(end)
        if more is not None:
            nfa.eps[more].append(end)
        return end


    def _embed(self, dfa: DenseAutomaton, start: int) -> int:
        """Copy a DFA into the NFA as a fragment entered from `start`."""
        nfa = self.nfa
        end = nfa.new_state()
        if dfa.start == 0:
            return end
        n_classes = dfa.trans.shape[1]
        class_masks = [0] * n_classes
        for b in range(256):
            class_masks[int(dfa.classes[b])] |= 1 << b
        states = [0] + [nfa.new_state() for _ in range(1, dfa.num_states)]
        nfa.eps[start].append(states[dfa.start])
        for s in range(1, dfa.num_states):
            by_target: dict[int, int] = {}
            for c, t in enumerate(dfa.trans[s].tolist()):
                if t:
                    by_target[t] = by_target.get(t, 0) | class_masks[c]
            nfa.edges[states[s]] = [(m, states[t]) for t, m in by_target.items()]
            if dfa.accepting[s]:
                nfa.eps[states[s]].append(end)
        return end


def build_nfa(node: Node, product: Callable[[Intersect | Difference], DenseAutomaton]) -> NFA:
    """Compile an IR node to an NFA whose language is exactly the node's; `product` builds product DFAs."""
    b = _Builder(product)
    start = b.nfa.new_state()
    b.nfa.start = start
    b.nfa.accept = b.build(node, start)
    return b.nfa
