"""Lark grammar text to a ContextFreeGrammar, in the dialect llguidance and OpenAI custom tools accept.

The `lark` package reads the grammar and expands its EBNF (optionals, repeats, groups, `~` ranges, templates,
`%import common.*`); this module maps its terminals to byte-level IR (string literals to their UTF-8 bytes,
regexes through `terminal_regex`) and its rules to plain BNF. Rule modifiers (`?rule`, `_rule`, `!rule`) and
rule priorities only shape lark's trees, so they are accepted and have no effect on the language.
"""

from __future__ import annotations

import re

from lark.exceptions import GrammarError as LarkGrammarError
from lark.exceptions import LarkError, UnexpectedInput, VisitError
from lark.grammar import NonTerminal, Symbol
from lark.grammar import Rule as LarkRule
from lark.lexer import PatternStr, TerminalDef, Token
from lark.load_grammar import GrammarBuilder, PackageResource, stdlib_loader
from lark.tree import Tree

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal, nonterminal_symbol
from tooldec.grammar.cfg.normalize import normalize
from tooldec.grammar.cfg.terminal_regex import literal_ir, regex_ir

_IMPORTABLE = ("common.lark",)
"""Lark's own grammar library files a grammar may import from; nothing is ever read from the file system."""

_AT_LINE = re.compile(r",? at line (\d+),? column (\d+)(?: in [^:\n]*)?:?")
_QUOTED = re.compile(r"""['"]([A-Za-z_][A-Za-z0-9_]*)['"]""")


class _ImportRefused(Exception):
    """An `%import` of something other than Lark's `common` library."""


def _import_loader(base_path: object, grammar_path: str) -> tuple[object, str]:
    """Serve `%import common.X` from lark's package; refuse relative and file imports (no file is opened)."""
    if grammar_path in _IMPORTABLE and (base_path is None or isinstance(base_path, PackageResource)):
        return stdlib_loader(base_path, grammar_path)  # type: ignore[no-any-return]
    raise _ImportRefused(grammar_path)


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character offset in `text`."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _definitions(text: str, name: str) -> list[int]:
    """Offsets of the lines that define rule or terminal `name` (modifiers and priority allowed)."""
    pattern = rf"^[ \t]*[?!]?{re.escape(name)}(?:\.-?\d+)?[ \t]*(?:\{{[^}}\n]*\}})?[ \t]*:"
    return [m.start() + len(m.group()) - len(m.group().lstrip(" \t")) for m in re.finditer(pattern, text, re.MULTILINE)]


def _first_use(text: str, name: str) -> int | None:
    """Offset of the first occurrence of the symbol `name`, outside literals, regexes and comments."""
    word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or (c == "/" and not text.startswith("//", i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif (m := word.match(text, i)) is not None:
            if m.group() == name:
                return i
            i = m.end()
        else:
            i += 1
    return None


def _located(message: str, text: str, offset: int | None) -> GrammarError:
    """A GrammarError at `offset` in `text` (no position when None)."""
    if offset is None:
        return GrammarError(message)
    line, column = _position(text, offset)
    return GrammarError(message, line=line, column=column)


def _from_visit(exc: VisitError) -> GrammarError:
    """An error lark raised while transforming part of the grammar, at that part's first token."""
    if exc.rule == "range":
        message = 'a range must join two one-character strings, like "a".."z"'
    else:
        message = f"cannot read this {exc.rule}" + (f": {exc.orig_exc}" if str(exc.orig_exc) else "")
    tokens = exc.obj.scan_values(lambda v: isinstance(v, Token)) if isinstance(exc.obj, Tree) else [exc.obj]
    first = next((t for t in tokens if isinstance(t, Token) and t.line is not None), None)
    if first is None:
        return GrammarError("invalid Lark grammar: " + message)
    return GrammarError("invalid Lark grammar: " + message, line=first.line, column=first.column)


def _from_lark(exc: LarkError, text: str) -> GrammarError:
    """lark's own error as a GrammarError, with the position lark gives or the place of the symbol it names."""
    if isinstance(exc, VisitError):
        if not isinstance(exc.orig_exc, LarkError):
            return _from_visit(exc)
        exc = exc.orig_exc
    first = str(exc).split("\n\n")[0]
    found = _AT_LINE.search(first)
    message = "invalid Lark grammar: " + " ".join(_AT_LINE.sub("", first).split())
    if isinstance(exc, UnexpectedInput) and exc.line > 0:
        return GrammarError(message, line=exc.line, column=exc.column)
    if found:
        return GrammarError(message, line=int(found.group(1)), column=int(found.group(2)))
    named = _QUOTED.search(first)
    if named is None:
        return GrammarError(message)
    defs = _definitions(text, named.group(1))
    offset = defs[1] if "more than once" in first and len(defs) > 1 else _first_use(text, named.group(1))
    return _located(message, text, offset)


def _terminal(term: TerminalDef, text: str) -> Terminal:
    """One lark terminal as a model terminal; refusals point at its definition (or its inline pattern)."""
    pattern = term.pattern
    literal = isinstance(pattern, PatternStr)
    try:
        if literal:
            node = literal_ir(pattern.value, pattern.flags, name=term.name)
        else:
            node = regex_ir(pattern.value, pattern.flags, name=term.name)
    except GrammarError as exc:
        defs = _definitions(text, term.name)
        spelled = text.find(f"/{pattern.value}/") if not literal else -1
        offset = defs[0] if defs else (spelled if spelled >= 0 else None)
        raise _located(exc.reason, text, offset) from None
    return Terminal(term.name, node, priority=term.priority, literal=literal)


def _optional_without_placeholders(tree: Tree) -> None:
    """Rewrite each `[x]` in a rule as `x?` (same language): lark keeps placeholders for `[x]` in its trees and so
    refuses `[x] [x]` as two identical rules, which the language does not care about."""
    for sub in tree.iter_subtrees():
        if sub.data == "maybe":
            sub.data = "expr"
            sub.children.append(Token("OP", "?"))


def _compile(text: str, start: str) -> tuple[list[TerminalDef], list[LarkRule], list[str]]:
    """lark's terminals, BNF rules and ignored terminal names for `text`, lark's errors mapped to ours."""
    declared = re.search(r"^[ \t]*%declare\b", text, re.MULTILINE)
    if declared:
        raise _located("%declare is not supported: every terminal needs a definition (a string or a regex)",
                       text, declared.end() - len("%declare"))
    try:
        builder = GrammarBuilder(False, [_import_loader])
        builder.load_grammar(text, "<grammar>")
        grammar = builder.build()
        for _name, _params, tree, _options in grammar.rule_defs:
            _optional_without_placeholders(tree)
        return grammar.compile([start], ())  # type: ignore[no-any-return]
    except _ImportRefused as exc:
        found = re.search(r"^[ \t]*%import[ \t]+(?!common\.)", text, re.MULTILINE)
        raise _located(f"%import of {exc} is not supported: only Lark's common library (%import common.NAME)",
                       text, found.end() if found else None) from None
    except (LarkGrammarError, UnexpectedInput, VisitError) as exc:
        raise _from_lark(exc, text) from None
    except LarkError as exc:
        raise GrammarError(f"invalid Lark grammar: {exc}") from None
    except RecursionError:
        raise GrammarError("the Lark grammar nests too deeply for lark to read it") from None


def parse_lark(text: str, start: str = "start") -> ContextFreeGrammar:
    """Read a Lark grammar into the normalized BNF model; GrammarError (with its position) if it is refused."""
    lark_terms, lark_rules, ignore = _compile(text, start)
    terminals = [_terminal(t, text) for t in lark_terms]
    term_index = {t.name: i for i, t in enumerate(terminals)}
    nt_index: dict[str, int] = {}
    for lark_rule in lark_rules:
        nt_index.setdefault(str(lark_rule.origin.name), len(nt_index))
    if start not in nt_index:
        raise GrammarError(f"the start rule {start!r} is not defined")

    def symbol(sym: Symbol) -> int:
        if isinstance(sym, NonTerminal):
            return nonterminal_symbol(nt_index[str(sym.name)])
        return term_index[str(sym.name)]

    rules = [Rule(nt_index[str(r.origin.name)], tuple(symbol(s) for s in r.expansion)) for r in lark_rules]
    return normalize(ContextFreeGrammar(
        terminals=tuple(terminals),
        nonterminals=tuple(nt_index),
        rules=tuple(rules),
        start=nt_index[start],
        ignore=tuple(term_index[name] for name in ignore),
        priorities=True,
    ))
