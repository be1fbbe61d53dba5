"""Calls of custom tools: one free-text input, guided by the tool's grammar inside the call's JSON string.

A custom tool (OpenAI's `{"type": "custom"}`) is called as `{"name": "<tool>", "arguments": "<input>"}` in the
JSON call syntax around it (Hermes: between `<tool_call>` tags): its input is a JSON string, so the grammar guides
the string's escaped text. JSON escaping maps each byte to a fixed code (`"` -> `\\"`, a backslash -> `\\\\`, a
control byte -> `\\n` or `\\u001f`, any other byte to itself, as `json.dumps(..., ensure_ascii=False)` writes),
and the codes form a prefix code, so escaping is a one-to-one map of byte strings that keeps lexemes apart:

- a terminal's escaped language is regular (`escaped` maps its IR node by node, products and differences
  included, which an injective map keeps);
- a lexeme of the escaped text ends where the raw one does (no escaped lexeme goes on with a raw `"`, the
  closing quote), and a Lark `%ignore` becomes explicit optional lexemes between the input's lexemes, ranked
  below every other terminal, as the lexer ranks ignored ones; so the escaped grammar's sentences are exactly
  the escaped sentences of the tool's grammar, nothing approximated.

`custom_call_grammar` puts the calls of every custom tool and one terminal of the function tools' calls (their
automaton, built as for any tool set) into one context-free grammar for the pushdown guide. Call formats whose
calls come in a list (Llama 3.1, Mistral, Python) are refused: a custom tool's call needs a JSON call on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tooldec.errors import GrammarError
from tooldec.grammar.calls import Aliased, CallFormat, JsonCall, ParsedCall, Wrapped
from tooldec.grammar.cfg import ContextFreeGrammar, Rule, Terminal, load_grammar
from tooldec.grammar.cfg.model import nonterminal_symbol
from tooldec.grammar.cfg.terminal_regex import fullmatch_ir
from tooldec.grammar.ir import (
    EMPTY,
    Alt,
    Bytes,
    Difference,
    Fields,
    Intersect,
    Node,
    Repeat,
    Seq,
    alt,
    lit,
    seq,
)
from tooldec.specs.toolspec import InputFormat

ESCAPES: dict[int, bytes] = {
    **{b: json.dumps(chr(b))[1:-1].encode() for b in range(0x20)}, 0x22: b'\\"', 0x5C: b"\\\\",
}
"""The bytes a JSON string writes escaped, and their escapes (`json.dumps` spelling)."""
_SPECIAL = sum(1 << b for b in ESCAPES)


def escaped(node: Node) -> Node:
    """The IR of the JSON-escaped texts of `node`'s texts (a string's inside, without its quotes)."""
    memo: dict[int, Node] = {}

    def walk(n: Node) -> Node:
        got = memo.get(id(n))
        if got is not None:
            return got
        out: Node
        if isinstance(n, Bytes):
            special = n.mask & _SPECIAL
            plain = [Bytes(n.mask & ~_SPECIAL)] if n.mask & ~_SPECIAL else []
            out = n if not special else alt(*plain, *(lit(e) for b, e in ESCAPES.items() if special >> b & 1))
        elif isinstance(n, Seq):
            out = Seq(tuple(map(walk, n.items)))
        elif isinstance(n, Alt):
            out = Alt(tuple(map(walk, n.items)))
        elif isinstance(n, Repeat):
            out = Repeat(walk(n.item), n.min, n.max, None if n.sep is None else walk(n.sep))
        elif isinstance(n, Fields):
            out = Fields(tuple((walk(item), required) for item, required in n.items), walk(n.sep))
        elif isinstance(n, Intersect):
            out = Intersect(tuple(map(walk, n.items)))
        else:
            out = Difference(walk(n.left), walk(n.right))
        memo[id(n)] = out
        return out

    return walk(node)


ANY_TEXT = r"(?s:.*)"
"""The regex of a custom tool whose format is free text."""


def input_grammar(fmt: InputFormat, tool: str) -> ContextFreeGrammar:
    """The grammar of a custom tool's raw input: its Lark grammar, or one terminal of its regex (free text: any);
    raises GrammarError naming the tool."""
    try:
        if fmt.syntax == "lark":
            return load_grammar(fmt.definition, "lark")
        pattern = ANY_TEXT if fmt.syntax == "text" else fmt.definition
        node = fullmatch_ir(pattern, name=tool)
        rules = (Rule(0, (0,)), *((Rule(0, ()),) if re.fullmatch(pattern, "") else ()))
        return ContextFreeGrammar((Terminal("INPUT", Difference(node, EMPTY)),), ("input",), rules, 0)
    except GrammarError as exc:
        raise GrammarError(f"custom tool {tool!r}: {exc.reason}", line=exc.line, column=exc.column,
                           tool=tool) from None


def json_call_pieces(fmt: CallFormat) -> tuple[tuple[tuple[str, str], ...], JsonCall]:
    """The (prefix, suffix) pairs a call may be written between and its JSON call format; raises GrammarError for a
    format whose calls are not JSON objects on their own (lists of calls, Python calls)."""
    base: Any = fmt
    while isinstance(base, Aliased | CustomCalls):
        base = base.inner
    if isinstance(base, Wrapped) and isinstance(base.inner, JsonCall):
        return base.pairs, base.inner
    if isinstance(base, JsonCall):
        return (("", ""),), base
    raise GrammarError(f"custom tools are called in JSON calls of their own (the hermes and json formats), "
                       f"not in the {getattr(base, 'name', type(base).__name__)} format")


class _Builder:
    """Terminals, nonterminals and rules of the grammar being built."""

    def __init__(self) -> None:
        self.terminals: list[Terminal] = []
        self.nonterminals: list[str] = []
        self.rules: list[Rule] = []

    def terminal(self, t: Terminal) -> int:
        """Add a terminal; its symbol."""
        self.terminals.append(t)
        return len(self.terminals) - 1

    def nonterminal(self, name: str) -> int:
        """Add a nonterminal; its (negative) symbol."""
        self.nonterminals.append(name)
        return nonterminal_symbol(len(self.nonterminals) - 1)

    def rule(self, lhs: int, *rhs: int) -> None:
        """Add the rule `lhs -> rhs` (symbols)."""
        self.rules.append(Rule(-lhs - 1, rhs))

    def escaped_input(self, tool: str, g: ContextFreeGrammar) -> int:
        """The symbol of `g`'s sentences, escaped, with its ignored lexemes made explicit."""
        if any(t.automaton is not None for t in g.terminals):
            raise GrammarError(f"custom tool {tool!r}: a terminal given as an automaton cannot be escaped", tool=tool)
        base = len(self.nonterminals)
        for name in g.nonterminals:
            self.nonterminal(f"{tool}:{name}")
        ignore = set(g.ignore)
        lowest = min((t.priority for t in g.terminals), default=0) - 1
        symbol: dict[int, int] = {}
        gap = self.nonterminal(f"{tool}:%ignore") if ignore else None
        for i, t in enumerate(g.terminals):
            kept = replace(t, name=f"{tool}:{t.name}", node=escaped(t.node))
            if i in ignore:
                assert gap is not None
                self.rule(gap, gap, self.terminal(replace(kept, priority=lowest)))
            elif gap is None:
                symbol[i] = self.terminal(kept)
            else:  # ignored lexemes may come before each lexeme
                symbol[i] = self.nonterminal(f"{tool}:%ignore {t.name}")
                self.rule(symbol[i], gap, self.terminal(kept))
        for r in g.rules:
            rhs = (symbol[s] if s >= 0 else nonterminal_symbol(base + (-s - 1)) for s in r.rhs)
            self.rule(nonterminal_symbol(base + r.lhs), *rhs)
        start = nonterminal_symbol(base + g.start)
        if gap is None:
            return start
        self.rule(gap)
        whole = self.nonterminal(f"{tool}:input")
        self.rule(whole, start, gap)  # and after the last lexeme
        return whole


def custom_call_grammar(fmt: CallFormat, inputs: Sequence[tuple[str, ContextFreeGrammar]],
                        functions: Terminal | None = None) -> ContextFreeGrammar:
    """One call in `fmt` of a custom tool of `inputs` ((name, grammar of its raw input)) or, through the terminal
    `functions` (the automaton of the function tools' calls), of a function tool; raises GrammarError for a
    format that is not a JSON call of its own (`json_call_pieces`)."""
    pairs, call = json_call_pieces(fmt)
    b = _Builder()
    start = b.nonterminal("call")
    if functions is not None:
        b.rule(start, b.terminal(functions))
    syn = call.syntax
    tails = [b.terminal(Terminal(f"tail{i}", seq(lit('"'), syn.closing("}"), lit(s)))) for i, (_, s) in enumerate(pairs)]
    for name, grammar in inputs:
        body = b.escaped_input(name, grammar)
        for i, (p, _) in enumerate(pairs):
            head = seq(lit(p), syn.opening("{"), lit(json.dumps(call.name_key) + syn.key_sep), lit(json.dumps(name)),
                       syn.separator(), lit(json.dumps(call.arguments_key) + syn.key_sep), lit('"'))
            b.rule(start, b.terminal(Terminal(f"{name}:head{i}", head)), body, tails[i])
    return ContextFreeGrammar(tuple(b.terminals), tuple(b.nonterminals), tuple(b.rules), 0)


@dataclass(frozen=True)
class CustomCalls:
    """A JSON call format in which the tools named in `custom` carry their input as a JSON string: it parses to a
    ParsedCall with that `input` (the aliases and pairs of `inner` kept)."""

    inner: CallFormat
    custom: frozenset[str]

    @property
    def name(self) -> str:
        """The inner format's name."""
        return self.inner.name

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`; raises CallParseError (through the inner format)."""
        call = self.inner.parse(text)
        if call.name in self.custom and isinstance(call.arguments, str):
            return ParsedCall(call.name, {}, input=call.arguments)
        return call
