"""The normalized context-free grammar that every front end (Lark, GBNF) produces and the CFG engine consumes.

Terminals are byte-level regular languages (IR nodes over raw UTF-8); rules are plain BNF over symbol numbers:
terminal i is `i`, nonterminal n is `-(n + 1)`, so a right-hand side is one tuple of ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from tooldec.grammar.ir import Node


@dataclass(frozen=True)
class Terminal:
    """A lexeme class: its byte language, and how it ranks when several terminals match the same lexeme."""

    name: str
    node: Node  # IR over raw UTF-8 bytes (not JSON-escaped); never matches ""
    priority: int = 0  # Lark terminal priority (TERM.2: ...); higher wins on a tie of lexemes
    literal: bool = False  # from a string literal: wins over a pattern on exactly the same lexeme
    automaton: Any = None
    """A prebuilt byte automaton `(trans, classes, accepting, start)` standing for the language instead of `node`,
    for a terminal cut out of an automaton (tooldec.automaton.value_grammar); `node` is then unused."""


class Rule(NamedTuple):
    """One BNF production `lhs -> rhs` (a named tuple: front ends build thousands, and a frozen dataclass's
    constructor and hash run in Python)."""

    lhs: int  # nonterminal index
    rhs: tuple[int, ...]  # terminal i -> i (>= 0), nonterminal n -> -(n + 1)


@dataclass(frozen=True)
class ContextFreeGrammar:
    """A grammar in plain BNF over byte-level terminals, with the lexer settings the engine needs."""

    terminals: tuple[Terminal, ...]
    nonterminals: tuple[str, ...]
    rules: tuple[Rule, ...]  # EBNF (?, *, +, groups, alternatives, ranges, ~ repeats) already expanded
    start: int  # nonterminal index
    ignore: tuple[int, ...] = ()  # terminals skipped between lexemes (%ignore)
    priorities: bool = True  # False for GBNF: every lexeme is one character and all matching terminals scan


def nonterminal_symbol(index: int) -> int:
    """The right-hand-side symbol of nonterminal `index` (negative, so terminals keep their own indices)."""
    return -(index + 1)


def symbol_nonterminal(symbol: int) -> int:
    """The nonterminal index of a negative right-hand-side symbol (the inverse of `nonterminal_symbol`)."""
    return -symbol - 1
