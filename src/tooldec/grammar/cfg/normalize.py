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


def _productive(grammar: ContextFreeGrammar) -> list[bool]:
    """Per nonterminal, whether it derives at least one terminal string."""
    count = len(grammar.nonterminals)
    waiting = [0] * len(grammar.rules)  # per rule, occurrences of nonterminals not yet known productive
    uses: list[list[int]] = [[] for _ in range(count)]  # per nonterminal, one rule index per occurrence
    for i, rule in enumerate(grammar.rules):
        for sym in rule.rhs:
            if sym < 0:
                waiting[i] += 1
                uses[-sym - 1].append(i)  # symbol_nonterminal, inlined: this loop sees every symbol
    productive = [False] * count
    queue = deque(rule.lhs for i, rule in enumerate(grammar.rules) if waiting[i] == 0)
    while queue:
        nt = queue.popleft()
        if productive[nt]:
            continue
        productive[nt] = True
        for i in uses[nt]:
            waiting[i] -= 1
            if waiting[i] == 0 and not productive[grammar.rules[i].lhs]:
                queue.append(grammar.rules[i].lhs)
    return productive


def normalize(grammar: ContextFreeGrammar) -> ContextFreeGrammar:
    """The same language with unproductive, unreachable and duplicate rules and unused symbols removed.

    Ignored terminals are kept even where no rule uses them. Raises GrammarError if the language is empty.
    """
    productive = _productive(grammar)
    if not productive[grammar.start]:
        raise GrammarError(f"the grammar's language is empty: start symbol {grammar.nonterminals[grammar.start]!r} "
                           "derives no string of terminals (each of its derivations recurses forever)")
    rules = grammar.rules
    live = rules if all(productive) else [r for r in rules if all(s >= 0 or productive[-s - 1] for s in r.rhs)]
    by_lhs: list[list[Rule]] = [[] for _ in grammar.nonterminals]
    for rule in live:
        by_lhs[rule.lhs].append(rule)
    reachable = [False] * len(grammar.nonterminals)
    reachable[grammar.start] = True
    queue = deque([grammar.start])
    while queue:
        for rule in by_lhs[queue.popleft()]:
            for sym in rule.rhs:
                if sym < 0 and not reachable[nt := symbol_nonterminal(sym)]:
                    reachable[nt] = True
                    queue.append(nt)
    kept = list(dict.fromkeys(live if all(reachable) else (r for r in live if reachable[r.lhs])))
    used_terms = set(grammar.ignore)
    used_terms.update(s for r in kept for s in r.rhs if s >= 0)
    ignore = tuple(dict.fromkeys(grammar.ignore))
    if len(kept) == len(rules) and all(reachable) and len(used_terms) == len(grammar.terminals):
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
