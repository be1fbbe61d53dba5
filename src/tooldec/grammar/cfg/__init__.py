"""Context-free grammars from Lark or GBNF text, normalized to the BNF model the CFG engine consumes."""

from __future__ import annotations

from typing import Literal

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.gbnf import parse_gbnf
from tooldec.grammar.cfg.lark_front import parse_lark
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal
from tooldec.grammar.cfg.normalize import normalize

__all__ = ["ContextFreeGrammar", "GrammarError", "Rule", "Terminal", "load_grammar", "normalize", "parse_gbnf",
           "parse_lark"]


def load_grammar(text: str, syntax: Literal["lark", "gbnf"]) -> ContextFreeGrammar:
    """The grammar `text` written in `syntax`, as the engine's normalized BNF (the one entry for both dialects)."""
    if syntax == "lark":
        return parse_lark(text)
    if syntax == "gbnf":
        return parse_gbnf(text)
    raise GrammarError(f"unknown grammar syntax {syntax!r} (expected 'lark' or 'gbnf')")
