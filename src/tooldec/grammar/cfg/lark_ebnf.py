"""Lark rule bodies to BNF alternatives: patterns named, templates instantiated, EBNF operators made helper rules.

One bottom-up pass per rule body, in the order Lark's in-place transformers visit the nodes (which fixes the
numbers in anonymous terminals' and helper rules' names), gives each node its alternatives directly: a node
stands either for one symbol ("T"/"N", name) or for a list of (symbols, alias). The expanded tree of a node,
which keys Lark's helper rules (equal trees share one), is built only for the items of `+`, `*` and `~`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tooldec.grammar.cfg.lark_reader import Definition, Node
from tooldec.grammar.cfg.lark_terms import AnonymousTerminals, Pattern

TREES = frozenset(("alts", "seq", "expr", "alias", "tmpl", "P"))
"""The kinds of the reader's tree nodes; any other tuple is a symbol ("T"/"N", name)."""
_REPEAT_SPLIT = 50  # `x ~ n..m` with m at least this is split into helper rules, as Lark splits it
_FACTOR_MAX = 5
_EMPTY: tuple[tuple[Node, ...], None] = ((), None)

Symbols = tuple[Node, ...]
Alternative = tuple[Symbols, "str | None"]


def bottom_up(tree: Node) -> list[Node]:
    """The tree nodes of `tree` in the order Lark's in-place transformers visit them (deepest level first)."""
    order, i = [tree], 0
    while i < len(order):
        node = order[i]
        i += 1
        if node[0] != "P":  # a pattern is a leaf
            order += [c for c in node[:0:-1] if type(c) is tuple and c[0] in TREES]
    order.reverse()
    return order


def _substitute(tree: Node, args: dict[str, Node]) -> Node:
    """A template body with its parameters replaced by the symbols given for them."""
    done: dict[int, Node] = {}
    for node in bottom_up(tree):
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
    """An expanded tree's alternatives as symbol sequences (with their alias), in Lark's order, duplicates
    dropped (for the bodies `~` builds)."""
    done: dict[int, list[Alternative]] = {}
    for node in bottom_up(tree):
        kind = node[0]
        if kind == "seq":
            acc: list[Symbols] = [()]
            for child in node[1:]:
                if child[0] not in TREES:  # a symbol: appended to every sequence so far
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
                if child[0] in TREES:
                    found.update(dict.fromkeys(done[id(child)]))
                else:
                    found[((child,), None)] = None
            done[id(node)] = list(found)
    return done[id(tree)]


def _options(got: Any) -> list[Symbols]:
    """The symbol sequences a node's expansion stands for (one symbol, or its alternatives)."""
    return [(got,)] if type(got) is tuple else [s for s, _alias in got]


class Expander:
    """The helper rules and template instances of one grammar, made while its rule bodies are expanded."""

    def __init__(self, defs: dict[str, Definition], anon: AnonymousTerminals, literals: dict[Node, int],
                 offsets: dict[str, int | None]) -> None:
        self.defs = defs
        self.anon = anon
        self.literals = literals
        self.offsets = offsets  # terminal name -> where an error about it points (anonymous ones added here)
        self.cache: dict[object, Node] = {}  # EBNF helper rules by what they repeat
        self.helpers: list[tuple[str, list[Alternative]]] = []
        self.instances: list[tuple[str, Definition]] = []  # template instances, in the order first used
        self.created: set[str] = set()
        self.count = 0
        self.prefix = ""
        self.terms: dict[Node, Node] = {}  # pattern leaf -> its terminal symbol (a literal recurs in many rules)
        self.aliased = False  # whether an alternative is renamed (`-> name`) anywhere

    def helper(self, kind: str, key: object, body: Callable[[Node], list[Alternative]]) -> Node:
        """The helper rule for `key` (its alternatives `body(symbol)`, made on first use), named after the rule
        being expanded."""
        found = self.cache.get(key)
        if found is None:
            name = f"__{self.prefix}_{kind}_{self.count}"
            self.count += 1
            found = self.cache[key] = ("N", name)
            self.helpers.append((name, body(found)))
        return found

    def repeat(self, a: int, b: int, target: Node, atom: Node) -> Node:
        """A helper rule matching `target` a times, then `atom` b times."""
        body = ("alts", ("seq", *[target] * a, *[atom] * b))
        return self.helper(f"repeat_a{a}_b{b}", (a, b, target, atom), lambda _found: _alternatives(body))

    def repeat_opt(self, a: int, b: int, target: Node, target_opt: Node, atom: Node) -> Node:
        """A helper rule matching fewer repetitions than `repeat(a, b, target, atom)` does."""
        body = ("alts", *[("seq", *[target] * i, target_opt) for i in range(a)],
                *[("seq", *[target] * a, *[atom] * i) for i in range(b)])
        return self.helper(f"repeat_a{a}_b{b}_opt", (a, b, target, atom, "opt"), lambda _found: _alternatives(body))

    def repeats(self, item: Node, lo: int, hi: int) -> Node:
        """`item ~ lo..hi` as an expanded tree: spelled out when short, split into helper rules (as Lark splits
        it) when long."""
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

    @staticmethod
    def tree_of(node: Node, done: dict[int, Any], trees: dict[int, Node]) -> Node:
        """The expanded tree of `node` (patterns named, operators replaced), from its nodes' expansions."""
        if node[0] not in TREES:
            return node
        made: dict[int, Node] = {}
        for n in bottom_up(node):
            kind = n[0]
            if kind == "P" or kind == "tmpl":
                made[id(n)] = done[id(n)]
            elif kind == "expr":
                made[id(n)] = ("alts", made.get(id(n[1]), n[1]), ("seq",)) if n[2] == "?" else trees[id(n)]
            else:
                made[id(n)] = (kind, *[made.get(id(c), c) for c in n[1:]])
        return made[id(node)]

    def expand(self, name: str, tree: Node) -> list[Alternative]:
        """A rule body's alternatives, in Lark's order, duplicates dropped."""
        self.prefix = name
        done: dict[int, Any] = {}  # node -> one symbol, or a list of alternatives
        trees: dict[int, Node] = {}  # `*`, `+` and `~` nodes -> their expanded trees
        for node in bottom_up(tree):
            kind = node[0]
            if kind == "seq":
                acc: list[Symbols] | None = None  # None: only the empty sequence so far
                run: list[Node] = []  # symbols appended to every sequence once a choice or the end comes
                for c in node[1:]:
                    got = done.get(id(c), c)
                    if type(got) is tuple:
                        run.append(got)
                    elif len(got) == 1:
                        run += got[0][0]
                    else:
                        if acc is None:
                            head = tuple(run)
                            acc = [head + s for s, _alias in got]
                        else:
                            if run:
                                tail = tuple(run)
                                acc = [a + tail for a in acc]
                            acc = [a + s for a in acc for s, _alias in got]
                        run = []
                if acc is None:
                    done[id(node)] = [(tuple(run), None)]
                else:
                    if run:
                        tail = tuple(run)
                        acc = [a + tail for a in acc]
                    done[id(node)] = [(s, None) for s in acc]
            elif kind == "alts":
                if len(node) == 2:  # one alternative: its list, deduplicated only where it has several entries
                    got = done.get(id(node[1]), node[1])
                    done[id(node)] = ([((got,), None)] if type(got) is tuple else got if len(got) == 1
                                      else list(dict.fromkeys(got)))
                    continue
                found: dict[Alternative, None] = {}
                for c in node[1:]:
                    got = done.get(id(c), c)
                    if type(got) is tuple:
                        found[((got,), None)] = None
                    else:
                        found.update(dict.fromkeys(got))
                done[id(node)] = list(found)
            elif kind == "P":
                term = self.terms.get(node)
                if term is None:
                    term_name = self.anon.name(Pattern(node[1], node[2], node[3]))
                    self.offsets.setdefault(term_name, self.literals.get(node))
                    term = self.terms[node] = ("T", term_name)
                done[id(node)] = term
            elif kind == "expr":
                done[id(node)] = self.operator(node, done, trees)
            elif kind == "alias":
                self.aliased = True
                done[id(node)] = [(s, node[2]) for s, _alias in done[id(node[1])]]
            else:
                done[id(node)] = self.instance(node, done)
        return done[id(tree)]  # type: ignore[no-any-return]

    def operator(self, node: Node, done: dict[int, Any], trees: dict[int, Node]) -> Any:
        """The expansion of `item?`, `item*`, `item+` or `item ~ lo..hi`."""
        item, op = node[1], node[2]
        got = done.get(id(item), item)
        if op == "?":
            return [((got,), None), _EMPTY] if type(got) is tuple else list(dict.fromkeys([*got, _EMPTY]))
        if op == "+" or op == "*":
            options = _options(got)
            found = self.helper("plus" if op == "+" else "star", self.tree_of(item, done, trees),
                                lambda h: list(dict.fromkeys([*[(s, None) for s in options],
                                                              *[((h, *s), None) for s in options]])))
            if op == "+":
                trees[id(node)] = found
                return found
            trees[id(node)] = ("alts", found, ("seq",))
            return [((found,), None), _EMPTY]
        expanded = trees[id(node)] = self.repeats(self.tree_of(item, done, trees), node[3], node[4])
        return expanded if expanded[0] not in TREES else _alternatives(expanded)

    def instance(self, node: Node, done: dict[int, Any]) -> Node:
        """The rule a template use stands for (its instance made on first use)."""
        args = [done.get(id(c), c) for c in node[2:]]
        result = f"{node[1]}{{{','.join(a[1] for a in args)}}}"
        if result not in self.created:
            self.created.add(result)
            template = self.defs[node[1]]
            body = _substitute(template.tree, dict(zip(template.params, args)))
            self.instances.append((result, Definition(result, False, body, template.offset)))
        return ("N", result)
