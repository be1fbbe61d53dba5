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
from functools import cache

from tooldec.errors import GrammarError
from tooldec.grammar.cfg.lark_reader import Definition, Ignore, Import, LarkSyntax, Node, error_at, read_lark
from tooldec.grammar.cfg.lark_terms import AnonymousTerminals, Pattern, term_pattern
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal, nonterminal_symbol
from tooldec.grammar.cfg.normalize import normalize
from tooldec.grammar.cfg.terminal_regex import literal_ir, regex_ir

_TREES = frozenset(("alts", "seq", "expr", "alias", "tmpl", "P"))
_REPEAT_SPLIT = 50  # `x ~ n..m` with m at least this is split into helper rules, as Lark splits it
_FACTOR_MAX = 5

Alternative = tuple[tuple[Node, ...], "str | None"]


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


def _bottom_up(tree: Node) -> list[Node]:
    """The tree nodes of `tree` in the order Lark's in-place transformers visit them (deepest level first)."""
    order, i = [tree], 0
    while i < len(order):
        node = order[i]
        i += 1
        order += [c for c in node[:0:-1] if type(c) is tuple and c[0] in _TREES]
    order.reverse()
    return order


def _substitute(tree: Node, args: dict[str, Node]) -> Node:
    """A template body with its parameters replaced by the symbols given for them."""
    done: dict[int, Node] = {}
    for node in _bottom_up(tree):
        kids = tuple(done.get(id(c), args.get(c[1], c) if type(c) is tuple and c[0] == "N" else c)
                     for c in node[1:])
        if node[0] == "tmpl" and node[1] in args:
            kids = (args[node[1]][1], *kids[1:])
        done[id(node)] = (node[0], *kids)
    return done[id(tree)]


def _small_factors(n: int) -> list[tuple[int, int]]:
    """Pairs (a, b), each a + b <= 5, such that folding x -> x * a + b from 1 gives n (Lark's repeat split)."""
    steps: list[tuple[int, int]] = []
    while n > _FACTOR_MAX:
        a = next(a for a in range(_FACTOR_MAX, 1, -1) if a + n % a <= _FACTOR_MAX)
        steps.append((a, n % a))
        n //= a
    steps.append((n, 0))
    return steps[::-1]


def _alternatives(tree: Node) -> list[Alternative]:
    """A rule body's alternatives as symbol sequences (with their alias), in Lark's order, duplicates dropped."""
    done: dict[int, list[Alternative]] = {}
    for node in _bottom_up(tree):
        kind = node[0]
        if kind == "seq":
            acc: list[tuple[Node, ...]] = [()]
            for child in node[1:]:
                if child[0] not in _TREES:  # a symbol: appended to every sequence so far
                    acc = [a + (child,) for a in acc]
                    continue
                options = done[id(child)]
                if len(options) == 1:
                    tail = options[0][0]
                    acc = [a + tail for a in acc]
                else:
                    acc = [a + s for a in acc for s, _alias in options]
            done[id(node)] = [(s, None) for s in acc]
        elif kind == "alias":
            done[id(node)] = [(s, node[2]) for s, _alias in done[id(node[1])]]
        else:
            found: dict[Alternative, None] = {}
            for child in node[1:]:
                if child[0] in _TREES:
                    found.update(dict.fromkeys(done[id(child)]))
                else:
                    found[((child,), None)] = None
            done[id(node)] = list(found)
    return done[id(tree)]


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
        self.cache: dict[object, Node] = {}  # EBNF helper rules by what they repeat
        self.helpers: list[tuple[str, Node]] = []
        self.count = 0
        self.prefix = ""

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
                if node[0] in _TREES and node[0] != "P":
                    stack += [c for c in node[:0:-1] if type(c) is tuple]
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

    def helper(self, kind: str, key: object, body: Node) -> Node:
        """The helper rule for `key` (made with `body` on first use), named after the rule being expanded."""
        found = self.cache.get(key)
        if found is None:
            name = f"__{self.prefix}_{kind}_{self.count}"
            self.count += 1
            found = self.cache[key] = ("N", name)
            self.helpers.append((name, body if kind not in ("plus", "star") else
                                 ("alts", ("seq", body), ("seq", found, body))))
        return found

    def repeat(self, a: int, b: int, target: Node, atom: Node) -> Node:
        """A helper rule matching `target` a times, then `atom` b times."""
        return self.helper(f"repeat_a{a}_b{b}", (a, b, target, atom), ("alts", ("seq", *[target] * a, *[atom] * b)))

    def repeat_opt(self, a: int, b: int, target: Node, target_opt: Node, atom: Node) -> Node:
        """A helper rule matching fewer repetitions than `repeat(a, b, target, atom)` does."""
        body = ("alts", *[("seq", *[target] * i, target_opt) for i in range(a)],
                *[("seq", *[target] * a, *[atom] * i) for i in range(b)])
        return self.helper(f"repeat_a{a}_b{b}_opt", (a, b, target, atom, "opt"), body)

    def repeats(self, item: Node, lo: int, hi: int) -> Node:
        """`item ~ lo..hi`: spelled out when short, split into helper rules (as Lark splits it) when long."""
        if hi < _REPEAT_SPLIT:
            return ("alts", *[("seq", *[item] * n) for n in range(lo, hi + 1)])
        low = item
        for a, b in _small_factors(lo):
            low = self.repeat(a, b, low, item)
        if hi == lo:
            return low
        factors = _small_factors(hi - lo + 1)
        target, optional = item, ("seq",)
        for a, b in factors[:-1]:
            optional = self.repeat_opt(a, b, target, optional, item)
            target = self.repeat(a, b, target, item)
        a, b = factors[-1]
        return ("alts", ("seq", low, self.repeat_opt(a, b, target, optional, item)))

    def expand(self, name: str, tree: Node, anon: AnonymousTerminals, rule_defs: list[tuple[str, Definition]],
               created: set[str]) -> Node:
        """A rule body with patterns named, templates instantiated and EBNF operators turned into BNF."""
        self.prefix = name
        done: dict[int, Node] = {}
        for node in _bottom_up(tree):
            kind = node[0]
            if kind == "P":
                term = anon.name(Pattern(node[1], node[2], node[3]))
                self.offsets.setdefault(term, self.syntax.literals.get(node))
                done[id(node)] = ("T", term)
                continue
            kids = tuple([done.get(id(c), c) for c in node[1:]])
            if kind == "tmpl":
                args = kids[1:]
                result = f"{kids[0]}{{{','.join(a[1] for a in args)}}}"
                if result not in created:
                    created.add(result)
                    template = self.defs[kids[0]]
                    body = _substitute(template.tree, dict(zip(template.params, args)))
                    rule_defs.append((result, Definition(result, False, body, template.offset)))
                done[id(node)] = ("N", result)
            elif kind == "expr":
                item, op, lo, hi = kids
                if op == "?":
                    done[id(node)] = ("alts", item, ("seq",))
                elif op == "+":
                    done[id(node)] = self.helper("plus", item, item)
                elif op == "*":
                    done[id(node)] = ("alts", self.helper("star", item, item), ("seq",))
                else:
                    done[id(node)] = self.repeats(item, lo, hi)
            else:
                done[id(node)] = (kind, *kids)
        return done[id(tree)]

    def rules(self, anon: AnonymousTerminals) -> list[tuple[str, tuple[Node, ...]]]:
        """Every rule as (name, symbols), in Lark's order, duplicates dropped (GrammarError if not empty)."""
        rule_defs = [(n, d) for n, d in self.defs.items() if not d.is_term]
        bodies: list[tuple[str, Node]] = []
        created: set[str] = set()
        i = 0
        while i < len(rule_defs):  # template instances are appended while this runs
            name, d = rule_defs[i]
            i += 1
            if not d.params:
                bodies.append((name, self.expand(name, d.tree, anon, rule_defs, created)))
        out: dict[tuple[str, tuple[Node, ...]], None] = {}
        for name, body in bodies + self.helpers:
            for symbols, alias in _alternatives(body):
                if alias is not None and name.startswith("_"):
                    raise self.fail(self.offsets.get(name), f"invalid Lark grammar: Rule {name} is marked for "
                                                            f"expansion and isn't allowed to have aliases ({alias})")
                if (name, symbols) in out and symbols:
                    raise self.fail(self.offsets.get(name), f"invalid Lark grammar: Rules defined twice: {name} "
                                                            "(aliases differ on the same expansion)")
                out[(name, symbols)] = None
        return list(out)

    def terminal(self, name: str, pattern: Pattern, priority: int) -> Terminal:
        """One terminal as byte-level IR; refusals point at its definition or its first use."""
        try:
            if pattern.kind == "str":
                node = literal_ir(pattern.value, sorted(pattern.flags), name=name)
            else:
                node = regex_ir(pattern.value, sorted(pattern.flags), name=name)
        except GrammarError as exc:
            raise self.fail(self.offsets.get(name), exc.reason) from None
        return Terminal(name, node, priority=priority, literal=pattern.kind == "str")

    def build(self, start: str) -> ContextFreeGrammar:
        """The grammar's terminals and BNF rules, unused ones dropped as Lark drops them, then normalized."""
        terminals = [(n, self.pattern(False, n), d.priority) for n, d in self.defs.items() if d.is_term]
        anon = AnonymousTerminals(terminals)
        rules = self.rules(anon)
        refs = [{s[1] for s in symbols if s[0] == "N"} - {origin} for origin, symbols in rules]
        while True:  # a rule used by none but itself goes, until none does
            used = {start}.union(*refs)
            kept = [i for i, r in enumerate(rules) if r[0] in used]
            if len(kept) == len(rules):
                break
            rules, refs = [rules[i] for i in kept], [refs[i] for i in kept]
        used_terms = {s[1] for _o, symbols in rules for s in symbols if s[0] == "T"}
        used_terms.update(self.ignore)
        compiled = [self.terminal(n, p, prio) for n, p, prio in anon.terminals if n in used_terms]
        term_index = {t.name: i for i, t in enumerate(compiled)}
        nt_index: dict[str, int] = {}
        for origin, _symbols in rules:
            nt_index.setdefault(origin, len(nt_index))
        if start not in nt_index:
            raise GrammarError(f"the start rule {start!r} is not defined")
        number = {("T", name): i for name, i in term_index.items()}
        number.update({("N", name): nonterminal_symbol(i) for name, i in nt_index.items()})
        bnf = [Rule(nt_index[o], tuple(map(number.__getitem__, symbols))) for o, symbols in rules]
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
