"""Normalization shared by the front ends: keep only what can take part in a sentence, once.

Productive symbols are found with a worklist (each rule counts its not-yet-productive occurrences), reachable
ones with a breadth-first walk from the start, so the cost is linear in the grammar's size and no Python
recursion happens however deep the grammar nests.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, nonterminal_symbol, symbol_nonterminal


def _graph(rules: tuple[Rule, ...], count: int) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """One pass over the symbols: per rule, how many nonterminals it names; per nonterminal, one rule index per
    occurrence of it, and the nonterminal symbols its rules name."""
    waiting = [0] * len(rules)
    uses: list[list[int]] = [[] for _ in range(count)]
    names: list[list[int]] = [[] for _ in range(count)]
    for i, (lhs, rhs) in enumerate(rules):
        named = names[lhs]
        before = len(named)
        for sym in rhs:
            if sym < 0:
                uses[~sym].append(i)  # symbol_nonterminal, inlined
                named.append(sym)
        waiting[i] = len(named) - before
    return waiting, uses, names


def _productive(rules: tuple[Rule, ...], waiting: list[int], uses: list[list[int]], count: int) -> list[bool]:
    """Per nonterminal, whether it derives at least one terminal string (`waiting`: per rule, its nonterminal
    occurrences, counted down here; `uses`: per nonterminal, one rule index per occurrence)."""
    productive = [False] * count
    queue = deque(rules[i].lhs for i, w in enumerate(waiting) if w == 0)
    while queue:
        nt = queue.popleft()
        if productive[nt]:
            continue
        productive[nt] = True
        for i in uses[nt]:
            waiting[i] -= 1
            if waiting[i] == 0 and not productive[rules[i].lhs]:
                queue.append(rules[i].lhs)
    return productive


def normalize(grammar: ContextFreeGrammar) -> ContextFreeGrammar:
    """The same language with unproductive, unreachable and duplicate rules and unused symbols removed.

    Ignored terminals are kept even where no rule uses them. Raises GrammarError if the language is empty.
    """
    rules = grammar.rules
    count = len(grammar.nonterminals)
    waiting, uses, names = _graph(rules, count)
    productive = _productive(rules, waiting, uses, count)
    if not productive[grammar.start]:
        raise GrammarError(f"the grammar's language is empty: start symbol {grammar.nonterminals[grammar.start]!r} "
                           "derives no string of terminals (each of its derivations recurses forever)")
    live: range | list[int] = range(len(rules))
    if not all(productive):
        live = [i for i, (_lhs, rhs) in enumerate(rules) if all(s >= 0 or productive[~s] for s in rhs)]
        names = [[] for _ in range(count)]  # per nonterminal, the nonterminal symbols its live rules name
        for i in live:
            names[rules[i].lhs] += [s for s in rules[i].rhs if s < 0]
    reachable = [False] * count
    reachable[grammar.start] = True
    queue = deque([grammar.start])
    while queue:
        for sym in names[queue.popleft()]:
            if not reachable[nt := ~sym]:
                reachable[nt] = True
                queue.append(nt)
    everywhere = all(reachable)
    if everywhere and len(live) == len(rules):
        kept = list(dict.fromkeys(rules))
    else:
        kept = list(dict.fromkeys(rules[i] for i in live if everywhere or reachable[rules[i].lhs]))
    used_terms = {s for s in set(grammar.ignore).union(*[rhs for _lhs, rhs in kept]) if s >= 0}
    ignore = tuple(dict.fromkeys(grammar.ignore))
    if len(kept) == len(rules) and everywhere and len(used_terms) == len(grammar.terminals):
        # nothing dropped: every symbol keeps its number (the common case, worth skipping the renumbering)
        return grammar if ignore == grammar.ignore else replace(grammar, ignore=ignore)
    term_map = {old: new for new, old in enumerate(sorted(used_terms))}
    nt_map = {old: new for new, old in enumerate(i for i, ok in enumerate(reachable) if ok)}

    def renumber(sym: int) -> int:
        return term_map[sym] if sym >= 0 else nonterminal_symbol(nt_map[symbol_nonterminal(sym)])

    return ContextFreeGrammar(
        terminals=tuple(grammar.terminals[t] for t in sorted(used_terms)),
        nonterminals=tuple(grammar.nonterminals[n] for n in nt_map),
        rules=tuple(Rule(nt_map[r.lhs], tuple(map(renumber, r.rhs))) for r in kept),
        start=nt_map[grammar.start],
        ignore=tuple(dict.fromkeys(term_map[t] for t in grammar.ignore)),
        priorities=grammar.priorities,
    )
