"""Lark grammar text to a ContextFreeGrammar, in the dialect llguidance and OpenAI custom tools accept.

`lark_reader` reads the text; this module resolves it the way Lark's own grammar loader does, so the result
is the one the `lark` package would build: `%import common.X` from the common.lark file Lark installs, terminals
joined into single patterns (`lark_terms`), anonymous terminals named as Lark names them, templates instantiated,
and EBNF (?, *, +, [..], groups, ~ repeats) expanded into helper rules with Lark's names. Terminals become
byte-level IR through `terminal_regex`. Rule modifiers (`?rule`, `_rule`, `!rule`), aliases and rule priorities
only shape Lark's trees, so they are accepted and have no effect on the language.
"""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from functools import cache
from itertools import chain

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.lark_ebnf import TREES, Expander, Symbols
from tooldec.grammar.cfg.lark_reader import Definition, Ignore, Import, LarkSyntax, Node, error_at, read_lark
from tooldec.grammar.cfg.lark_terms import AnonymousTerminals, Pattern, term_pattern
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal, nonterminal_symbol
from tooldec.grammar.cfg.normalize import normalize
from tooldec.grammar.cfg.terminal_regex import literal_ir, regex_ir
from tooldec.grammar.ir import lit


@cache
def _common() -> dict[str, Definition]:
    """The definitions of the common.lark file installed with the `lark` package (read once)."""
    spec = importlib.util.find_spec("lark")
    if spec is None or not spec.submodule_search_locations:
        raise GrammarError("%import common needs the lark package, which holds common.lark")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "grammars", "common.lark")
    with open(path, encoding="utf-8") as f:
        statements = read_lark(f.read()).statements
    return {d.name: d for d in statements if isinstance(d, Definition)}


def _unused(blocks: dict[str, set[Node]], start: str) -> set[str]:
    """The rules Lark drops: those of a name that no other name's rules use (but `start`), until none goes."""
    users = Counter(chain.from_iterable(blocks.values()))  # symbol -> how many names' rules use it
    dropped: set[str] = set()
    queue = [name for name, symbols in blocks.items()
             if name != start and users[key := ("N", name)] == (key in symbols)]
    while queue:
        name = queue.pop()
        if name in dropped:
            continue
        dropped.add(name)
        for sym in blocks[name]:
            if sym[0] == "N" and sym[1] != name:
                users[sym] -= 1
                used = blocks.get(sym[1])  # None: not a rule (a template, refused if its user is kept)
                if used is not None and users[sym] == (sym in used) and sym[1] != start:
                    queue.append(sym[1])
    return dropped


class _Builder:
    """One grammar's definitions, resolved into terminals and BNF rules as Lark resolves them."""

    def __init__(self, text: str, syntax: LarkSyntax) -> None:
        self.text = text
        self.syntax = syntax
        self.defs: dict[str, Definition] = {}  # local name -> definition, in Lark's order
        self.imported: set[str] = set()  # local names whose definition comes from common.lark
        self.ignore: list[str] = []
        self.patterns: dict[tuple[bool, str], Pattern | None] = {}  # (from common, name) -> pattern; None: busy
        self.offsets: dict[str, int | None] = {}  # terminal name -> where an error about it points

    def fail(self, offset: int | None, message: str) -> GrammarError:
        """A GrammarError at `offset` (none when None)."""
        return GrammarError(message) if offset is None else error_at(self.text, offset, message)

    def define(self, name: str, definition: Definition, offset: int) -> None:
        """Add a definition; GrammarError if the name is taken or reserved."""
        kind = "Terminal" if definition.is_term else "Rule"
        if name in self.defs:
            raise self.fail(offset, f"invalid Lark grammar: {kind} '{name}' defined more than once")
        if name.startswith("__"):
            raise self.fail(offset, f"invalid Lark grammar: Names starting with double-underscore are reserved "
                                    f"(Error at {name})")
        if definition.inlined_expand1:
            raise self.fail(offset, "invalid Lark grammar: Inlined rules (_rule) cannot use the ?rule modifier.")
        self.defs[name] = definition
        self.offsets[name] = offset

    def load(self) -> None:
        """Imports first (in common.lark's order), then definitions and ignores in the order written."""
        imports: dict[tuple[str, ...], tuple[int, dict[str, str]]] = {}
        for st in self.syntax.statements:
            if isinstance(st, Import):
                if st.relative or st.path != ("common",):
                    raise self.fail(st.offset, f"%import of {os.path.join(*st.path)}.lark is not supported: only "
                                               "Lark's common library (%import common.NAME)")
                imports.setdefault(st.path, (st.offset, {}))[1].update(st.aliases)
        for offset, aliases in imports.values():
            for name, definition in _common().items():
                if name in aliases:
                    self.define(aliases[name], definition, offset)
                    self.imported.add(aliases[name])
        for st in self.syntax.statements:
            if isinstance(st, Definition):
                self.define(st.name, st, st.offset)
            elif isinstance(st, Ignore):
                if st.tree[0] == "alts" and len(st.tree) == 2 and len(st.tree[1]) == 2 and st.tree[1][1][0] == "T":
                    self.ignore.append(st.tree[1][1][1])
                else:
                    name = f"__IGNORE_{len(self.ignore)}"
                    self.ignore.append(name)
                    self.defs[name] = Definition(name, True, st.tree, st.offset)
                    self.offsets[name] = st.offset

    def validate(self) -> None:
        """Every symbol and template used is defined (templates with the right number of arguments)."""
        uses = self.syntax.uses
        if not self.syntax.templates and all(name in self.defs for name in uses):
            self.check_ignored()  # every name used is defined: no tree needs walking
            return
        for name, d in self.defs.items():
            if name in self.imported:
                continue
            for p in d.params:
                if p in self.defs:
                    raise self.fail(d.offset, f"invalid Lark grammar: Template Parameter conflicts with rule {p} "
                                              f"(in template {name})")
            stack = [d.tree]
            while stack:
                node = stack.pop()
                if node[0] in ("T", "N") and node[1] not in self.defs and node[1] not in d.params:
                    kind = "Terminal" if node[0] == "T" else "Rule"
                    raise self.fail(uses.get(node[1]), f"invalid Lark grammar: {kind} '{node[1]}' used but not "
                                                       f"defined (in {'terminal' if d.is_term else 'rule'} {name})")
                if node[0] == "tmpl" and node[1] not in d.params:
                    template = self.defs.get(node[1])
                    if template is None or len(template.params) != len(node) - 2:
                        raise self.fail(uses.get(node[1]), f"invalid Lark grammar: template '{node[1]}' is not "
                                                           f"defined with {len(node) - 2} parameters")
                if node[0] in TREES and node[0] != "P":
                    stack += [c for c in node[:0:-1] if type(c) is tuple]
        self.check_ignored()

    def check_ignored(self) -> None:
        """Every terminal named by `%ignore` is defined."""
        missing = [n for n in self.ignore if n not in self.defs]
        if missing:
            raise GrammarError(f"invalid Lark grammar: Terminals {missing} were marked to ignore but were not defined")

    def pattern(self, common: bool, name: str) -> Pattern:
        """The pattern of terminal `name` (of common.lark, or of this grammar), references inlined."""
        key = (common, name)
        if key in self.patterns:
            found = self.patterns[key]
            if found is None:
                raise self.fail(self.offsets.get(name), f"invalid Lark grammar: Recursion in terminal '{name}' "
                                                        "(recursion is only allowed in rules, not terminals)")
            return found
        if common:
            definition = _common().get(name)
        else:
            definition = self.defs.get(name)
            common = name in self.imported
        if definition is None or not definition.is_term:
            raise self.fail(self.syntax.uses.get(name), f"invalid Lark grammar: Terminal used but not defined: {name}")
        self.patterns[key] = None
        try:
            found = term_pattern(name, definition.tree, lambda ref: self.pattern(common, ref))
        except GrammarError as exc:
            if exc.line is not None:
                raise
            raise self.fail(self.offsets.get(name), exc.reason) from None
        self.patterns[key] = found
        return found

    def rules(self, anon: AnonymousTerminals) -> list[tuple[str, list[Symbols]]]:
        """Every rule name with its alternatives' symbols, in Lark's order, duplicates dropped (GrammarError if not
        empty)."""
        expander = Expander(self.defs, anon, self.syntax.literals, self.offsets)
        bodies = [(n, expander.expand(n, d.tree)) for n, d in self.defs.items() if not d.is_term and not d.params]
        i = 0
        while i < len(expander.instances):  # template instances, made while this runs
            name, d = expander.instances[i]
            i += 1
            bodies.append((name, expander.expand(name, d.tree)))
        if not expander.aliased:  # no alias: the alternatives, already without duplicates, keep apart
            return [(name, [symbols for symbols, _alias in alternatives])
                    for name, alternatives in bodies + expander.helpers]
        out: list[tuple[str, list[Symbols]]] = []
        for name, alternatives in bodies + expander.helpers:  # each name once
            seen: dict[Symbols, None] = {}
            for symbols, alias in alternatives:
                if alias is not None and name.startswith("_"):
                    raise self.fail(self.offsets.get(name), f"invalid Lark grammar: Rule {name} is marked for "
                                                            f"expansion and isn't allowed to have aliases ({alias})")
                if symbols in seen and symbols:
                    raise self.fail(self.offsets.get(name), f"invalid Lark grammar: Rules defined twice: {name} "
                                                            "(aliases differ on the same expansion)")
                seen[symbols] = None
            out.append((name, list(seen)))
        return out

    def terminal(self, name: str, pattern: Pattern, priority: int) -> Terminal:
        """One terminal as byte-level IR; refusals point at its definition or its first use."""
        if pattern.kind == "str" and not pattern.flags and pattern.value.isascii() and pattern.value:
            return Terminal(name, lit(pattern.value.encode()), priority=priority, literal=True)  # literal_ir's
        try:
            flags = sorted(pattern.flags) if pattern.flags else ()
            if pattern.kind == "str":
                node = literal_ir(pattern.value, flags, name=name)
            else:
                node = regex_ir(pattern.value, flags, name=name)
        except GrammarError as exc:
            raise self.fail(self.offsets.get(name), exc.reason) from None
        return Terminal(name, node, priority=priority, literal=pattern.kind == "str")

    def build(self, start: str) -> ContextFreeGrammar:
        """The grammar's terminals and BNF rules, unused ones dropped as Lark drops them, then normalized."""
        terminals = [(n, self.pattern(False, n), d.priority) for n, d in self.defs.items() if d.is_term]
        anon = AnonymousTerminals(terminals)
        rules = self.rules(anon)
        blocks = {name: set().union(*alternatives) for name, alternatives in rules}  # the symbols each name uses
        dropped = _unused(blocks, start)
        used_terms = {s[1] for o, symbols in blocks.items() if o not in dropped for s in symbols if s[0] == "T"}
        used_terms.update(self.ignore)
        compiled = [self.terminal(n, p, prio) for n, p, prio in anon.terminals if n in used_terms]
        term_index = {t.name: i for i, t in enumerate(compiled)}
        nt_index = {name: i for i, name in enumerate(n for n in blocks if n not in dropped)}
        if start not in nt_index:
            raise GrammarError(f"the start rule {start!r} is not defined")
        number = {("T", name): i for name, i in term_index.items()}
        number.update({("N", name): nonterminal_symbol(i) for name, i in nt_index.items()})
        symbol, new = number.__getitem__, tuple.__new__  # a Rule made as the tuple it is: its __new__ runs in Python
        bnf: list[Rule] = []
        try:
            for o, alternatives in rules:
                if o not in dropped:
                    lhs = nt_index[o]
                    bnf += [new(Rule, (lhs, tuple(map(symbol, symbols)))) for symbols in alternatives]
        except KeyError as exc:  # a template used as a plain rule (as Lark, only where the rule is kept)
            name = exc.args[0][1]
            raise self.fail(self.syntax.uses.get(name), f"invalid Lark grammar: template '{name}' is not defined "
                                                        "with 0 parameters") from None
        return normalize(ContextFreeGrammar(
            terminals=tuple(compiled),
            nonterminals=tuple(nt_index),
            rules=tuple(bnf),
            start=nt_index[start],
            ignore=tuple(term_index[name] for name in self.ignore),
            priorities=True,
        ))


def parse_lark(text: str, start: str = "start") -> ContextFreeGrammar:
    """Read a Lark grammar into the normalized BNF model; GrammarError (with its position) if it is refused."""
    try:
        builder = _Builder(text, read_lark(text))
        builder.load()
        builder.validate()
        return builder.build(start)
    except RecursionError:
        raise GrammarError("the Lark grammar nests too deeply to be read") from None
