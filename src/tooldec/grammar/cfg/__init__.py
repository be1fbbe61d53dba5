"""Context-free grammars from Lark or GBNF text, normalized to the BNF model the CFG engine consumes."""

from __future__ import annotations

import re
from typing import Literal

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.gbnf import parse_gbnf
from tooldec.grammar.cfg.lark_front import parse_lark
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal
from tooldec.grammar.cfg.normalize import normalize

__all__ = ["ContextFreeGrammar", "GrammarError", "Rule", "Terminal", "load_grammar", "normalize", "parse_gbnf",
           "parse_lark", "sniff_syntax"]

_GBNF_RULE = re.compile(r"^[ \t]*[A-Za-z_][A-Za-z0-9_-]*[ \t]*::=", re.MULTILINE)
"""A line that starts a GBNF rule, `name ::= ...` (Lark writes `name: ...`)."""


def sniff_syntax(text: str) -> Literal["lark", "gbnf"]:
    """The dialect of a grammar sent without one (vLLM's `structured_outputs.grammar`): GBNF when a line defines
    a rule with `::=`, Lark otherwise."""
    return "gbnf" if _GBNF_RULE.search(text) else "lark"


def load_grammar(text: str, syntax: Literal["lark", "gbnf"]) -> ContextFreeGrammar:
    """The grammar `text` written in `syntax`, as the engine's normalized BNF (the one entry for both dialects)."""
    if syntax == "lark":
        return parse_lark(text)
    if syntax == "gbnf":
        return parse_gbnf(text)
    raise GrammarError(f"unknown grammar syntax {syntax!r} (expected 'lark' or 'gbnf')")
