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


def _productive(rules: tuple[Rule, ...], needs: list[list[int]], count: int) -> list[bool]:
    """Per nonterminal, whether it derives at least one terminal string (`needs`: each rule's nonterminals)."""
    waiting = [len(n) for n in needs]  # per rule, occurrences of nonterminals not yet known productive
    uses: list[list[int]] = [[] for _ in range(count)]  # per nonterminal, one rule index per occurrence
    for i, n in enumerate(needs):
        for sym in n:
            uses[~sym].append(i)  # symbol_nonterminal, inlined
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
    needs = [[s for s in rhs if s < 0] for _lhs, rhs in rules]  # per rule, its nonterminals
    productive = _productive(rules, needs, count)
    if not productive[grammar.start]:
        raise GrammarError(f"the grammar's language is empty: start symbol {grammar.nonterminals[grammar.start]!r} "
                           "derives no string of terminals (each of its derivations recurses forever)")
    every = all(productive)
    live = range(len(rules)) if every else [i for i, n in enumerate(needs) if all(productive[~s] for s in n)]
    by_lhs: list[list[int]] = [[] for _ in range(count)]  # per nonterminal, its live rules' indices
    for i in live:
        by_lhs[rules[i].lhs].append(i)
    reachable = [False] * count
    reachable[grammar.start] = True
    queue = deque([grammar.start])
    while queue:
        for i in by_lhs[queue.popleft()]:
            for sym in needs[i]:
                if not reachable[nt := ~sym]:
                    reachable[nt] = True
                    queue.append(nt)
    everywhere = all(reachable)
    kept = list(dict.fromkeys(rules[i] for i in live if everywhere or reachable[rules[i].lhs]))
    used_terms = {s for s in set(grammar.ignore).union(*[r.rhs for r in kept]) if s >= 0}
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
