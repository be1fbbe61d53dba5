"""IR → DFA: Thompson NFA, subset construction, with product automata for Intersect and Difference nodes."""

from __future__ import annotations

from tooldec.automaton.dfa import DFA, determinize
from tooldec.automaton.nfa import build_nfa
from tooldec.automaton.product import difference, intersect
from tooldec.grammar.ir import Difference, Intersect, Node


def _product(node: Intersect | Difference) -> DFA:
    if isinstance(node, Difference):
        return difference(compile_dfa(node.left), compile_dfa(node.right))
    result = compile_dfa(node.items[0])
    for item in node.items[1:]:
        result = intersect(result, compile_dfa(item))
    return result


def compile_dfa(node: Node) -> DFA:
    """IR node → pruned DFA. An empty language gives a DFA whose start is DEAD."""
    return determinize(build_nfa(node, _product))
