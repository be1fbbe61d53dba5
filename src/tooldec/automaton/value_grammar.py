"""A recursive JSON value grammar → a context-free grammar over JSON tokens, for the pushdown guide.

A schema whose values nest without bound (a `$ref` inside itself, any value) compiles to rules: IR in which
`call(k)` marks a nested value of rule k (`tooldec.grammar.schema`, `recursive=True`). Each rule becomes a DFA
(a call is three marker bytes in it). The DFA's states between JSON tokens become nonterminals, and each token
read from such a state to the next becomes a terminal: a byte automaton cut out of the rule's DFA (a string from
its quote to its closing quote, a number or literal, one punctuation or whitespace byte). The rules are
left-linear (`A_q -> A_p token`, `A_q -> A_p call`), so the Earley items of one rule's run keep one origin.

JSON tokens are self-delimiting: a string ends at its closing quote, a punctuation byte is a token alone, and a
number or literal ends where the next byte cannot continue it, which in JSON is always where it ends. So the
core's greedy lexer cuts lexemes exactly where the rule's DFA passes between tokens, and the grammar has the
language of the rules, with no depth limit.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence

import numpy as np

from tooldec import _core
from tooldec.automaton.compile import compile_dfas
from tooldec.automaton.dfa import DEAD, DFA
from tooldec.errors import EmptyGrammarError, GrammarError
from tooldec.grammar.cfg.model import ContextFreeGrammar, Rule, Terminal, nonterminal_symbol
from tooldec.grammar.cfg.normalize import normalize
from tooldec.grammar.ir import (
    CALL_MARKER,
    EMPTY,
    Alt,
    Bytes,
    Difference,
    Fields,
    Intersect,
    Node,
    Repeat,
    Seq,
)

PUNCTUATION = frozenset(b"{}[],: \t\n\r")
"""Bytes that are a token alone (structure and whitespace)."""
WORD = frozenset(b"+-.0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""Bytes of numbers and literals (`true`, `null`, ...): such a token runs while the next byte is one of them."""
QUOTE, BACKSLASH = 0x22, 0x5C
_IN, _ESCAPE = 0, 1  # string modes; 2..5 are the four digits of a \u escape
MAX_WALK_STATES = 4_000_000
"""Product states (DFA state, mode) one token's walk may reach before the rule counts as too large to cut."""
MAX_TERMINAL_STATES = 1 << 16
"""States one terminal's automaton may have (the pushdown lexer's bound, `MAX_LEXER_STATES` in the core): a token
past it (a 1,024-character email string: 241,660) makes the rules untokenizable at once, before the other tokens
of the rule are walked for a grammar `compile_cfg` would refuse."""

Automaton = tuple[np.ndarray, np.ndarray, np.ndarray, int]
"""A terminal's automaton as the core takes it: (trans int32[states, classes], classes uint8[256], accepting, start)."""


class NotTokenizable(ValueError):
    """The rules are not JSON token streams the pushdown path can cut (a call inside a product, a byte that starts
    no JSON token): the schema is compiled with recursion unrolled instead."""


def calls_in_products(nodes: Sequence[Node]) -> bool:
    """Whether a call's marker lies inside an Intersect or Difference of any of `nodes` (the product of automata
    would treat the marker as bytes, not as the language it stands for); a difference that only takes the empty
    string away (a one-or-more) is as right with calls as without."""
    marker = 1 << CALL_MARKER
    calls: dict[int, bool] = {}  # id(node) -> whether a marker lies below it (nodes are shared: each done once)

    def has_call(root: Node) -> bool:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                calls[id(node)] = any(calls[id(k)] for k in _children(node))
            elif id(node) not in calls:
                if isinstance(node, Bytes):
                    calls[id(node)] = node.mask == marker
                else:
                    stack.append((node, True))
                    stack.extend((k, False) for k in _children(node) if id(k) not in calls)
        return calls[id(root)]

    seen: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Difference) and node.right == EMPTY:
            stack.append(node.left)  # only the empty string removed: the same with calls as without
        elif isinstance(node, (Intersect, Difference)):
            if has_call(node):
                return True
        else:
            stack.extend(_children(node))
    return False


def _children(node: Node) -> tuple[Node, ...]:
    """The nodes directly below `node` (none below a leaf)."""
    if isinstance(node, (Seq, Alt, Intersect)):
        return node.items
    if isinstance(node, Repeat):
        return (node.item,) if node.sep is None else (node.item, node.sep)
    if isinstance(node, Fields):
        return (*[item for item, _ in node.items], node.sep)
    if isinstance(node, Difference):
        return (node.left, node.right)
    return ()


class _Terminals:
    """Terminal automata by their structure, so a token language met in many places is one terminal."""

    def __init__(self) -> None:
        self.automata: list[Automaton] = []
        self.names: list[str] = []
        self._ids: dict[bytes, int] = {}

    def add(self, automaton: Automaton, name: str) -> int:
        """The terminal of `automaton` (states numbered in a walk's breadth-first order, as `_Walk.automaton`
        builds them, so equal structures over the same byte classes are equal arrays)."""
        trans, classes, accepting, _ = automaton
        key = b"|".join((trans.tobytes(), str(trans.shape).encode(), classes.tobytes(), accepting.tobytes()))
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = len(self.automata)
            self.automata.append(automaton)
            self.names.append(name)
        return got


class _Rule:
    """One rule's DFA cut into JSON tokens: its boundary nodes (state, after a word) and the edges between."""

    def __init__(self, dfa: DFA, index: int, terminals: _Terminals) -> None:
        self.dfa = dfa
        self.index = index
        self.terminals = terminals
        self.nodes: dict[tuple[int, bool], int] = {}
        self.edges: list[tuple[int, int, int]] = []  # (from node, symbol: terminal >= 0 or rule -(k + 1), to node)
        self.accepting: list[int] = []
        self._strings: dict[int, list[tuple[int, int]]] = {}  # first state inside a string -> (terminal, landing)
        self._words: dict[int, list[tuple[int, int]]] = {}
        self._single: dict[int, int] = {}  # punctuation byte -> its terminal
        self._trans = np.asarray(dfa.trans)
        self._classes = np.asarray(dfa.classes)
        self._refinements: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._word_ends_cache: np.ndarray | None = None
        self._build()

    def _node(self, state: int, after_word: bool, queue: deque[tuple[int, bool]]) -> int:
        key = (state, after_word)
        got = self.nodes.get(key)
        if got is None:
            got = self.nodes[key] = len(self.nodes)
            queue.append(key)
        return got

    def _build(self) -> None:
        queue: deque[tuple[int, bool]] = deque()
        self._node(self.dfa.start, False, queue)
        while queue:
            state, after_word = queue.popleft()
            here = self.nodes[(state, after_word)]
            if self.dfa.accepting[state]:
                self.accepting.append(here)
            row = self._byte_row(state)
            words_done = after_word
            for b in np.flatnonzero(row).tolist():
                target = int(row[b])
                if b in PUNCTUATION:
                    self.edges.append((here, self._single_terminal(b), self._node(target, False, queue)))
                elif b == QUOTE:
                    for term, land in self._string_tokens(target):
                        self.edges.append((here, term, self._node(land, False, queue)))
                elif b in WORD:
                    if not words_done:
                        words_done = True
                        for term, land in self._word_tokens(state):
                            self.edges.append((here, term, self._node(land, True, queue)))
                elif b == CALL_MARKER:
                    for rule, land in self._calls(target):
                        self.edges.append((here, -(rule + 1), self._node(land, True, queue)))
                else:
                    raise NotTokenizable(f"byte {b:#04x} starts no JSON token (rule {self.index})")

    def _single_terminal(self, byte: int) -> int:
        got = self._single.get(byte)
        if got is None:
            trans = np.array([[0, 0], [0, 2], [0, 0]], dtype=np.int32)
            classes = np.zeros(256, dtype=np.uint8)
            classes[byte] = 1
            got = self._single[byte] = self.terminals.add(
                (trans, classes, np.array([False, False, True]), 1), repr(chr(byte)))
        return got

    def _byte_row(self, state: int) -> np.ndarray:
        """The state each byte leads to from `state` (0: none)."""
        return self._trans[state][self._classes]

    def _calls(self, state: int) -> list[tuple[int, int]]:
        out = []
        first = self._byte_row(state)
        for hi in np.flatnonzero(first).tolist():
            mid = int(first[hi])
            second = self._byte_row(mid)
            for lo in np.flatnonzero(second).tolist():
                out.append((hi << 8 | lo, int(second[lo])))
        return out

    def _string_tokens(self, inside: int) -> list[tuple[int, int]]:
        """Terminals of the strings whose first byte after the quote leaves the DFA in `inside`, by the state
        their closing quote lands in."""
        got = self._strings.get(inside)
        if got is None:
            got = self._strings[inside] = self._cut(inside, "string")
        return got

    def _word_tokens(self, state: int) -> list[tuple[int, int]]:
        """Terminals of the numbers and literals read from boundary `state`, by the state each ends in."""
        got = self._words.get(state)
        if got is None:
            got = self._words[state] = self._cut(state, "word")
        return got

    def _refined(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """Byte classes for one token kind: bytes the rule's DFA treats alike and the token's modes too (a quote,
        a backslash, `u`, any other byte; a word byte or not). Returns (class per byte, a byte per
        class)."""
        got = self._refinements.get(kind)
        if got is None:
            category = _STRING_CATEGORY if kind == "string" else _WORD_CATEGORY
            key = self._classes.astype(np.int64) * 8 + category
            _, reps, inverse = np.unique(key, return_index=True, return_inverse=True)
            got = self._refinements[kind] = (inverse.reshape(-1).astype(np.uint8), reps)
        return got

    def _cut(self, origin: int, kind: str) -> list[tuple[int, int]]:
        """Explore one token's walk from `origin` (a virtual start: for a string the state after its quote, for a
        word the boundary state) over the kind's byte classes, breadth first over product states (DFA state,
        mode) in the compiled core, and make one terminal per landing state."""
        classes, reps = self._refined(kind)
        columns = self._classes[reps].astype(np.int32)
        ends_here = self._word_end_states() if kind == "word" else None
        try:
            size, src, cls, dst, landings = _core.token_walk(
                self._trans, columns, self._modes(kind), origin, _IN, ends_here, MAX_WALK_STATES)
        except _core.AutomatonTooLarge as exc:
            raise NotTokenizable(f"{exc} (rule {self.index})") from None
        walk = _Walk(size, src, cls, dst)
        if kind == "word":
            landings = self._merged_word_landings(landings)
        out = []
        for land, stops, members in landings:
            automaton = walk.automaton(stops, members, classes, len(reps), kind)
            if len(automaton[0]) > MAX_TERMINAL_STATES:
                raise NotTokenizable(f"a {kind} token of {len(automaton[0]):,} states, past the lexer's "
                                     f"{MAX_TERMINAL_STATES:,} (rule {self.index})")
            out.append((self.terminals.add(automaton, f"{kind}@{self.index}"), land))
        return out

    def _merged_word_landings(
        self, landings: list[tuple[int, np.ndarray, np.ndarray]]
    ) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Word landings whose futures are one, merged into the first of them: after a word only a byte that is
        not a word byte may follow, so landings alike on those bytes and in acceptance lead on alike (a bounded
        number's DFA ends its digits in hundreds of states that all go on to the same `,` or `}`; as hundreds of
        terminals they made a lexer of hundreds of live terminals at every value)."""
        non_word = np.unique(self._classes[[b for b in range(256) if b not in WORD]])
        groups: dict[bytes, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        for landing in landings:
            land = landing[0]
            key = self._trans[land, non_word].tobytes() + bytes([bool(self.dfa.accepting[land])])
            groups.setdefault(key, []).append(landing)
        out = []
        for group in groups.values():
            if len(group) == 1:
                out.append(group[0])
                continue
            stops = np.unique(np.concatenate([g[1] for g in group]), axis=0)
            members = functools.reduce(np.union1d, (g[2] for g in group))
            out.append((group[0][0], stops, members))
        return out

    def _modes(self, kind: str) -> np.ndarray:
        """Per (mode, class of `_refined(kind)`): the mode after a byte of the class, _CLOSES where it closes the
        token, -1 where the byte is not the token's."""
        _, reps = self._refined(kind)
        base = _STRING_MODES if kind == "string" else _WORD_MODES
        return np.ascontiguousarray(base[:, reps])

    def _word_end_states(self) -> np.ndarray:
        """Per DFA state, whether a word may end there: the rule ends there, or a byte other than a word byte goes
        on (the next byte then ends the word)."""
        if self._word_ends_cache is None:
            non_word = np.unique(self._classes[[b for b in range(256) if b not in WORD]])
            self._word_ends_cache = np.asarray(self.dfa.accepting, dtype=bool) | (self._trans[:, non_word] != 0).any(axis=1)
        return self._word_ends_cache


def _categories(groups: list[frozenset[int] | set[int]]) -> np.ndarray:
    out = np.zeros(256, dtype=np.int64)
    for i, group in enumerate(groups, start=1):
        out[list(group)] = i
    return out


_STRING_CATEGORY = _categories([{QUOTE}, {BACKSLASH}, {0x75}])
_WORD_CATEGORY = _categories([set(WORD)])
_CLOSES = -2  # the core's TOKEN_CLOSES


def _string_modes() -> np.ndarray:
    """Per (string mode, byte): the next mode (in, after a backslash, the four digits of a \\u escape), or
    _CLOSES for the quote that ends the string."""
    out = np.zeros((6, 256), dtype=np.int64)
    out[_IN, QUOTE] = _CLOSES
    out[_IN, BACKSLASH] = _ESCAPE
    out[_ESCAPE, 0x75] = 2
    for digit in (2, 3, 4):
        out[digit, :] = digit + 1
    return out


_STRING_MODES = _string_modes()
_WORD_MODES = np.full((6, 256), -1, dtype=np.int64)
_WORD_MODES[_IN, sorted(WORD)] = _IN


class _Walk:
    """One token kind's walk from a boundary state, as edge arrays (product state, class, next product state) in
    the order of their source; product states are numbered breadth first from the virtual start 0, as the
    exploration met them (`_core.token_walk`)."""

    def __init__(self, size: int, src: np.ndarray, cls: np.ndarray, dst: np.ndarray) -> None:
        self.f_ptr = np.searchsorted(src, np.arange(size + 1))
        self.f_dst, self.f_cls = dst, cls

    def automaton(self, stops: np.ndarray, members: np.ndarray, classes: np.ndarray, n_classes: int,
                  kind: str) -> Automaton:
        """The automaton of the walks from product state 0 that end in one landing (`stops`: int64[m, 2] rows of
        (state, class) whose class closes the token there; class -1: the token may stop in that state; `members`: the states that
        lead to them, ascending), its states in the walk's breadth-first order (so equal walks give equal
        arrays)."""
        lead = 1 if kind == "string" else 0  # a string's lexeme starts at its opening quote: one state before
        first = 1 + lead  # product state members[i] -> row first + i (start 0 -> first), breadth-first order kept
        size = len(members) + 2 + lead  # dead, [the quote], states, the accepting sink
        sink = size - 1
        trans = np.zeros((size, n_classes), dtype=np.int32)
        accepting = np.zeros(size, dtype=bool)
        # the edges out of the members (only theirs: a landing's walk is a small part of a wide one), kept where
        # they lead to a member too
        starts, counts = self.f_ptr[members], self.f_ptr[members + 1] - self.f_ptr[members]
        rows = np.repeat(np.arange(len(members)), counts)
        edge = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(starts, counts)
        to = np.searchsorted(members, self.f_dst[edge])
        keep = to < len(members)
        keep[keep] = members[to[keep]] == self.f_dst[edge[keep]]
        trans[rows[keep] + first, self.f_cls[edge[keep]]] = to[keep] + first
        at = np.searchsorted(members, stops[:, 0]) + first
        closes = stops[:, 1] >= 0
        accepting[at[~closes]] = True
        trans[at[closes], stops[closes, 1]] = sink
        accepting[sink] = bool(closes.any())
        if lead:
            trans[1, classes[QUOTE]] = 2
        return trans, classes, accepting, 1


def value_grammar(start: Node, rules: Sequence[Node], threads: int = 1) -> ContextFreeGrammar:
    """The context-free grammar of one value of `start`, in which `call(k)` is a value of `rules[k]`.

    Raises NotTokenizable where the rules are not JSON token streams (see the module docstring)."""
    nodes = [start, *rules]
    if calls_in_products(nodes):
        raise NotTokenizable("a recursive value inside a difference or intersection of languages")
    dfas = compile_dfas(nodes, threads=threads)
    terminals = _Terminals()
    cut = [_Rule(dfa, i, terminals) for i, dfa in enumerate(dfas)]
    names = [f"value{i}" for i in range(len(cut))]
    first_node: list[int] = []
    for r in cut:
        first_node.append(len(names))
        names.extend(f"value{r.index}.{j}" for j in range(len(r.nodes)))
    out: list[Rule] = []
    for i, r in enumerate(cut):
        if r.dfa.start == DEAD:
            continue
        base = first_node[i]
        out.append(Rule(base, ()))
        for a, symbol, b in r.edges:
            if symbol < 0:  # a call of rules[k], which is nonterminal k + 1 (0 is the start value)
                k = -symbol - 1
                if k >= len(rules):
                    raise NotTokenizable(f"a call of rule {k}, past the {len(rules)} rules given")
                symbol = nonterminal_symbol(k + 1)
            out.append(Rule(base + b, (nonterminal_symbol(base + a), symbol)))
        out.extend(Rule(i, (nonterminal_symbol(base + a),)) for a in r.accepting)
    grammar = ContextFreeGrammar(
        terminals=tuple(Terminal(name, Bytes(0), automaton=a) for name, a in zip(terminals.names, terminals.automata)),
        nonterminals=tuple(names),
        rules=tuple(out),
        start=0,
        priorities=False,
    )
    try:
        return normalize(grammar)
    except GrammarError:
        raise EmptyGrammarError("no value satisfies this schema", path="#") from None
