"""Call formats: the grammar of a whole tool call over a tool set, and the parser that reads one back.

A format is a function from one tool to the IR of a call of it; the tool set's grammar is the alternation
over tools (the DFA turns the shared prefixes of tool names into a trie) wrapped in the format's prefix and
suffix. New formats compose existing ones: `Wrapped(JsonCall(), "<tool_call>\\n", "\\n</tool_call>")`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import keyword
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol

from tooldec.errors import EmptyGrammarError, ToolDecError, ToolSpecError
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.grammar.ir import NOTHING, Fields, Node, Repeat, alt, lit, opt, seq
from tooldec.grammar.numbers import DEFAULT_DIGITS, DigitLimits, limit_digits
from tooldec.grammar.schema import INT_FORMATS, Decide, SchemaCompiler
from tooldec.grammar.syntax import JSON, JSON_LINES, PYTHON, ValueSyntax
from tooldec.specs import ToolSpec

_PY_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ParsedCall:
    """A tool call read back from generated text; `positional` holds arguments given by position (ToolkenGPT),
    `input` the text input of a custom tool's call (which has no arguments)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    positional: tuple[Any, ...] = ()
    input: str | None = None

    def bind(self, tool: ToolSpec) -> dict[str, Any]:
        """All arguments by name: positional ones take the tool's parameters in declaration order."""
        names = list(tool.parameters.get("properties", {}))
        if len(self.positional) > len(names):
            raise CallParseError(f"{self.name} takes at most {len(names)} arguments, got {len(self.positional)}")
        return {**dict(zip(names, self.positional, strict=False)), **self.arguments}


def new_calls(calls: Sequence[ParsedCall], made: Sequence[ParsedCall]) -> list[ParsedCall]:
    """The calls of `calls` that are not in `made` nor earlier in `calls`, in order: what a block adds to a turn
    (the one rule for repeats, which the guided policy and the reader of calls share)."""
    new: list[ParsedCall] = []
    for call in calls:
        if call not in made and call not in new:
            new.append(call)
    return new


TOOL_ANY_VALUE_BUDGET = 20_000
"""Any-value states per tool (SchemaCompiler has 80,000 for one value): a tool set is the union of its tools'
automata, and RestBench's 54 TMDB tools at 80,000 each passed the 500,000-state bound of the union."""


class ArgumentCompiler(SchemaCompiler):
    """The schema compiler of a call's arguments, whose typed numbers have at most `digits` digits (widened
    where a schema's bounds need more), so a guided number always ends; `digits=None` leaves them unbounded.

    Only what the grammar admits is limited: the right side of a difference (`not`) stays a superset."""

    any_value_budget = TOOL_ANY_VALUE_BUDGET
    free_form_maps = True  # BFCL's `gradeDict: {type: dict}` is a map the model fills; the arguments stay closed

    def __init__(self, root: Any, *, digits: DigitLimits | None, syntax: ValueSyntax, tool: str,
                 max_ref_depth: int, decide: Decide) -> None:
        super().__init__(root, syntax=syntax, tool=tool, max_ref_depth=max_ref_depth, decide=decide)
        self.digits = digits

    def _one_type(self, t: str, schema: dict, path: str) -> Node:
        node = super()._one_type(t, schema, path)
        if self.digits is None or self._negative or t not in ("integer", "number"):
            return node
        bounds = [schema.get(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
        bounds += INT_FORMATS.get(schema.get("format"), ())
        numeric = [b for b in bounds if isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)]
        step = schema.get("multipleOf")
        steps = [step] if isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step) else []
        return limit_digits(node, self.digits.for_bounds(numeric, steps))


class CallParseError(ToolDecError, ValueError):
    """Text that is not a complete call in the expected format."""


class CallFormat(Protocol):
    """How one tool is called, and how a call is read back."""

    name: str

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool`, which may also be named by any of `names` (aliases)."""
        ...

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`; raises CallParseError."""
        ...

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (what the grammar generates for these arguments)."""
        ...


@dataclass(frozen=True)
class JsonCall:
    """`{"name": "<tool>", "arguments": {...}}` in JSON whose layout `syntax` sets: compact (canonical) by
    default, or also pretty-printed (JSON_LINES)."""

    name: str = "json"
    name_key: str = "name"
    arguments_key: str = "arguments"
    digits: DigitLimits | None = DEFAULT_DIGITS
    syntax: ValueSyntax = JSON

    def _head(self, name: str) -> str:
        return "{" + json.dumps(self.name_key) + ": " + json.dumps(name) + ", " + json.dumps(self.arguments_key) + ": "

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool` (named by its name or one of `names`)."""
        syn = self.syntax
        args = ArgumentCompiler(tool.parameters, digits=self.digits, syntax=syn, tool=tool.name,
                                max_ref_depth=max_ref_depth, decide=decide)
        return seq(
            syn.opening("{"), lit(json.dumps(self.name_key) + syn.key_sep),
            alt(*(lit(json.dumps(n)) for n in (tool.name, *names))),
            syn.separator(), lit(json.dumps(self.arguments_key) + syn.key_sep),
            args.value(path="#/parameters"), syn.closing("}"),
        )

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`; raises CallParseError."""
        try:
            obj = json.loads(text)
            return ParsedCall(obj[self.name_key], obj[self.arguments_key])
        except (ValueError, KeyError, TypeError) as exc:
            raise CallParseError(f"not a JSON call: {text!r}") from exc

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (what the grammar generates for these arguments)."""
        return self._head(tool.name) + CanonicalWriter(tool.parameters, JSON).dumps(arguments) + "}"


@dataclass(frozen=True)
class PythonCall:
    """`tool(a=1, b="x")`: keyword arguments in parameter order, Python literals."""

    name: str = "python"
    digits: DigitLimits | None = DEFAULT_DIGITS

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool` (named by its name or one of `names` that is an identifier)."""
        comp = ArgumentCompiler(tool.parameters, digits=self.digits, syntax=PYTHON, tool=tool.name,
                                max_ref_depth=max_ref_depth, decide=decide)
        props = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        spellings = [tool.name, *(n for n in names if _PY_IDENT.match(n) and not keyword.iskeyword(n))]
        fields = []
        for pname, sub in props.items():
            path = f"#/parameters/properties/{pname}"
            if not _PY_IDENT.match(pname) or keyword.iskeyword(pname):
                raise ToolSpecError(
                    f"parameter {pname!r} cannot be a Python keyword argument; use the json format",
                    tool=tool.name,
                    path=path,
                )
            value = comp.value(sub, path)
            fields.append((seq(lit(pname + "="), value), pname in required))
        return seq(alt(*(lit(n + "(") for n in spellings)), Fields(tuple(fields), lit(", ")), lit(")"))

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`; raises CallParseError."""
        name, paren, rest = text.partition("(")
        if not paren:
            raise CallParseError(f"not a Python call: {text!r}")
        try:
            node = ast.parse("f(" + rest, mode="eval").body
            if not isinstance(node, ast.Call) or node.args:
                raise CallParseError(f"not a keyword-argument call: {text!r}")
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
        except (SyntaxError, ValueError) as exc:
            raise CallParseError(f"not a Python call: {text!r}") from exc
        return ParsedCall(name.strip(), args)

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (what the grammar generates for these arguments)."""
        writer = CanonicalWriter(tool.parameters, PYTHON)
        props = tool.parameters.get("properties", {})
        parts = [f"{k}={writer.dumps(arguments[k], props[k])}" for k in props if k in arguments]
        return tool.name + "(" + ", ".join(parts) + ")"


@dataclass(frozen=True)
class Wrapped:
    """Another format between fixed text, e.g. Hermes/Qwen `<tool_call>\\n{...}\\n</tool_call>`; `also` holds other
    (prefix, suffix) pairs a call may be written between (Qwen's Markdown ```` ```json\\n{...}\\n``` ````), and
    `bare`, when set, the inner call's own first bytes, which open a call written with no wrapping at all
    (Qwen2.5-Coder's bare `{"name": "...", "arguments": {...}}`). With `several`, one (prefix, suffix) pair may
    hold several calls, each after one of `between` (Qwen2.5-Coder writes parallel calls `{...},\n{...}` in one
    `<tool_call>` block); a bare call stands alone."""

    inner: CallFormat
    prefix: str
    suffix: str
    name: str = "wrapped"
    also: tuple[tuple[str, str], ...] = ()
    bare: str = ""
    several: bool = False
    between: tuple[str, ...] = (",\n", "\n", ", ")

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """Every (prefix, suffix) pair, the canonical one first (a bare call's is `("", "")`)."""
        return ((self.prefix, self.suffix), *self.also, *((("", ""),) if self.bare else ()))

    @property
    def openings(self) -> tuple[str, ...]:
        """The triggers that open a call: the prefixes without their trailing newline (`<tool_call>`,
        ```` ```json ````), then `bare`."""
        return tuple(p.rstrip("\n") if p else self.bare for p, _ in self.pairs)

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool` (named by its name or one of `names`), between any pair."""
        body = self.inner.call(tool, max_ref_depth=max_ref_depth, decide=decide, names=names)
        return alt(*(seq(lit(p), body, lit(s)) for p, s in self.pairs))

    def block(self, any_call: Node, run: Node | None = None) -> Node:
        """IR of calls of `any_call` between one pair: one call, or with `several` one or more `between` apart
        (`run`, when the caller has that language built; a bare call stands alone), and then the text may also
        end after a call before the closing (Qwen2.5-Coder, made to call, ends its turn right after the JSON)."""
        if not self.several:
            return alt(*(seq(lit(p), any_call, lit(s)) for p, s in self.pairs))
        calls = run if run is not None else Repeat(any_call, 1, None, alt(*map(lit, self.between)))
        closed = [seq(lit(p), calls if p else any_call, lit(s)) for p, s in self.pairs]
        return alt(*closed, *(seq(lit(p), calls) for p, _ in self.pairs if p))  # or the text ends in the block

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text` (the first, where a pair holds several); raises CallParseError."""
        return self.parse_all(text)[0]

    def parse_all(self, text: str) -> list[ParsedCall]:
        """Every call written in `text`: one, or with `several` those in one pair (its closing written or not);
        raises CallParseError."""
        for prefix, suffix in self.pairs:
            closed = text.endswith(suffix) and len(text) >= len(prefix) + len(suffix)
            if text.startswith(prefix) and (closed or (self.several and prefix)):
                inside = text[len(prefix) : len(text) - len(suffix) if closed else len(text)]
                parts = _calls_apart(inside, self.between) if self.several and prefix else [inside]
                return [self.inner.parse(part) for part in parts]
        raise CallParseError(f"call not between {self.prefix!r} and {self.suffix!r}: {text!r}")

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (what the grammar generates for these arguments)."""
        return self.prefix + self.inner.render(tool, arguments) + self.suffix


@dataclass(frozen=True)
class ToolkenCall:
    """ToolkenGPT's inline call `<tool>(a,b)=`: positional Python literals in parameter order.

    Required parameters are always given; optional ones may follow in order (so `add` with two required and
    two optional operands takes 2, 3 or 4). The tool's result is written after `=` by the caller.
    """

    name: str = "toolken"
    digits: DigitLimits | None = DEFAULT_DIGITS

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool` (named by its name or one of `names`)."""
        comp = ArgumentCompiler(tool.parameters, digits=self.digits, syntax=PYTHON, tool=tool.name,
                                max_ref_depth=max_ref_depth, decide=decide)
        props = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        values = [(comp.value(sub, f"#/parameters/properties/{p}"), p in required) for p, sub in props.items()]
        seen_optional = False
        for _, req in values:
            if req and seen_optional:
                raise ToolSpecError("positional calls need required parameters first", tool=tool.name)
            seen_optional |= not req
        tail: Node = seq()
        for i in range(len(values) - 1, -1, -1):
            value, req = values[i]
            item = seq(lit(",") if i else seq(), value, tail)
            tail = item if req else opt(item)
        return seq(lit("<"), alt(*(lit(n) for n in (tool.name, *names))), lit(">("), tail, lit(")="))

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`; raises CallParseError."""
        m = re.fullmatch(r"<([^>]+)>\((.*)\)=", text, flags=re.DOTALL)
        if not m:
            raise CallParseError(f"not a ToolkenGPT call: {text!r}")
        try:
            values = ast.literal_eval("(" + m.group(2) + ",)") if m.group(2) else ()
        except (SyntaxError, ValueError) as exc:
            raise CallParseError(f"bad arguments in {text!r}") from exc
        return ParsedCall(m.group(1), {}, tuple(values))

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (what the grammar generates for these arguments)."""
        writer = CanonicalWriter(tool.parameters, PYTHON)
        props = tool.parameters.get("properties", {})
        parts = [writer.dumps(arguments[k], props[k]) for k in props if k in arguments]
        return "<" + tool.name + ">(" + ",".join(parts) + ")="


@dataclass(frozen=True)
class ReactCall:
    """ReAct's action: `Action: <tool>\nAction Input: {json}\n` (the planner writes the Observation)."""

    name: str = "react"
    digits: DigitLimits | None = DEFAULT_DIGITS

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool` (named by its name or one of `names`)."""
        args = ArgumentCompiler(tool.parameters, digits=self.digits, syntax=JSON, tool=tool.name,
                                max_ref_depth=max_ref_depth, decide=decide)
        name = alt(*(lit(n) for n in (tool.name, *names)))
        return seq(lit("Action: "), name, lit("\nAction Input: "), args.value(path="#/parameters"), lit("\n"))

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`; raises CallParseError."""
        m = re.fullmatch(r"Action: *([^\n]+)\nAction Input: *(.*?)\n?", text, flags=re.DOTALL)
        if not m:
            raise CallParseError(f"not a ReAct action: {text!r}")
        try:
            args = json.loads(m.group(2))
        except ValueError as exc:
            raise CallParseError(f"Action Input is not JSON: {text!r}") from exc
        if not isinstance(args, dict):
            raise CallParseError(f"Action Input is not an object: {text!r}")
        return ParsedCall(m.group(1).strip(), args)

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (what the grammar generates for these arguments)."""
        args = CanonicalWriter(tool.parameters, JSON).dumps(arguments)
        return f"Action: {tool.name}\nAction Input: {args}\n"


@dataclass(frozen=True)
class ParallelCalls:
    """Several calls in one list, e.g. Mistral's `[TOOL_CALLS][{...}, {...}]` (the control token is the trigger),
    Python's `f(a=1), g(b=2)` (no brackets); with `single`, one call may also stand alone, unlisted (Llama 3.1's
    `{...}` or `[{...}, {...}]`)."""

    inner: CallFormat
    open: str = "["
    close: str = "]"
    sep: str = ", "
    max_calls: int = 8
    name: str = "parallel"
    single: bool = False

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of one call of `tool` (the list around calls is `around`)."""
        return self.inner.call(tool, max_ref_depth=max_ref_depth, decide=decide, names=names)

    def around(self, any_call: Node) -> Node:
        """The list of one to `max_calls` calls (or one call alone, with `single`)."""
        listed = seq(lit(self.open), Repeat(any_call, 1, self.max_calls, lit(self.sep)), lit(self.close))
        return alt(any_call, listed) if self.single else listed

    def parse(self, text: str) -> ParsedCall:
        """The first call of the list; `parse_all` gives every call."""
        return self.parse_all(text)[0]

    def parse_all(self, text: str) -> list[ParsedCall]:
        """Every call of the list (or the one call alone, with `single`); raises CallParseError."""
        if self.single and not text.lstrip().startswith(self.open):
            return [self.inner.parse(text)]
        body = text.strip()
        if not (body.startswith(self.open) and body.endswith(self.close)):
            raise CallParseError(f"calls not between {self.open!r} and {self.close!r}: {text!r}")
        items = _list_items(body[len(self.open) : len(body) - len(self.close)])
        if not items:
            raise CallParseError(f"not a non-empty list of calls: {text!r}")
        return [self.inner.parse(item) for item in items]

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a list holding one call."""
        return self.open + self.inner.render(tool, arguments) + self.close


def _calls_apart(text: str, between: tuple[str, ...]) -> list[str]:
    """The texts of the JSON calls written one after another in `text`, each after one of `between` (longest
    first); raises CallParseError where `text` is not such a run."""
    parts, at, decoder = [], 0, json.JSONDecoder()
    ordered = sorted(between, key=len, reverse=True)
    while True:
        try:
            _, end = decoder.raw_decode(text, at)
        except ValueError as exc:
            raise CallParseError(f"not a run of JSON calls: {text!r}") from exc
        parts.append(text[at:end])
        if end == len(text):
            return parts
        sep = next((b for b in ordered if text.startswith(b, end)), None)
        if sep is None:
            raise CallParseError(f"calls not apart by {', '.join(map(repr, between))}: {text!r}")
        at = end + len(sep)


def _list_items(text: str) -> list[str]:
    """The texts of the comma-separated items of a JSON array's or a Python tuple's inside; raises CallParseError."""
    try:
        return [json.dumps(item) for item in json.loads("[" + text + "]")]
    except ValueError:
        pass
    try:
        node = ast.parse("(" + text + ",)", mode="eval").body
    except SyntaxError as exc:
        raise CallParseError(f"not a list of calls: {text!r}") from exc
    items = node.elts if isinstance(node, ast.Tuple) else []
    return [ast.get_source_segment("(" + text + ",)", item) or "" for item in items]


_SEPARATORS = "_-/ "
MIN_ALIAS_LETTERS = 3
"""Shorter suffixes (`id`, `of`) name nothing a model means by them."""


def _word_starts(name: str) -> list[int]:
    """Where the words of a name begin: after `_ - / space`, at a camelCase hump (`getWeather`, `HTTPServer`)."""
    starts = []
    for i, c in enumerate(name):
        if c in _SEPARATORS:
            continue
        prev = name[i - 1] if i else ""
        after = name[i + 1] if i + 1 < len(name) else ""
        if (not prev or prev in _SEPARATORS or (prev.islower() and c.isupper())
                or (prev.isupper() and c.isupper() and after.islower())
                or (prev.isalpha() != c.isalpha() and prev.isalnum() and c.isalnum())):
            starts.append(i)
    return starts


def _snake(text: str) -> str:
    """`search/movie`, `CurrentWeather` -> `search_movie`, `current_weather`."""
    starts = _word_starts(text)
    words = [text[a:b].strip(_SEPARATORS) for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    return "_".join(w.lower() for w in words if w)


def _spellings(name: str) -> set[str]:
    """A name's own snake_case spelling and its word-aligned proper suffixes, as written and in snake_case."""
    out = {_snake(name)}
    for i in _word_starts(name)[1:]:
        suffix = name[i:]
        if suffix[0].isdigit() or sum(c.isalpha() for c in suffix) < MIN_ALIAS_LETTERS:
            continue
        out |= {suffix, _snake(suffix)}
    out.discard(name)
    out.discard("")
    return out


def name_aliases(names: Iterable[str]) -> dict[str, str]:
    """Alias -> tool name: each word-aligned suffix of a name (`children` for `number_of_children`, `movie` and
    `search_movie` for `GET /search/movie`) that no other tool shares and that names no tool itself.

    A prefix trie of names makes a model commit to a name from its first token: a model that means
    `number_of_children` and writes `children` is refused `child` and picks another name. Unique suffixes
    let it name the tool the way it wanted to, and the call still parses to one tool."""
    names = list(names)
    owners: dict[str, set[str]] = {}
    for name in names:
        for alias in _spellings(name):
            owners.setdefault(alias, set()).add(name)
    taken = set(names)
    return {alias: next(iter(o)) for alias, o in sorted(owners.items()) if len(o) == 1 and alias not in taken}


@dataclass(frozen=True, repr=False)
class Aliased:
    """Another format in which a call may name a tool by an alias; it parses to (and renders) the tool's name.

    The aliases are compiled into the same name trie as the names (`<children>(` and `<number_of_children>(`
    both lead to the same argument machine)."""

    inner: CallFormat
    aliases: tuple[tuple[str, str], ...]
    """(alias, tool name) pairs."""

    @property
    def name(self) -> str:
        """The inner format's name (the aliases change no syntax)."""
        return self.inner.name

    @cached_property
    def canonical(self) -> dict[str, str]:
        """Alias -> tool name."""
        return dict(self.aliases)

    @cached_property
    def _of_tool(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for alias, name in self.aliases:
            out[name] = (*out.get(name, ()), alias)
        return out

    def __repr__(self) -> str:
        """Short and distinct per alias table (compiled grammars are cached by the format's repr)."""
        digest = hashlib.sha256(json.dumps(self.aliases).encode()).hexdigest()[:16]
        return f"Aliased({self.inner!r}, aliases={len(self.aliases)}:{digest})"

    def call(self, tool: ToolSpec, *, max_ref_depth: int, decide: Decide,
             names: tuple[str, ...] = ()) -> Node:
        """IR of every valid call of `tool`, named by its name, `names` or the aliases of any of them."""
        aliases = tuple(a for n in (tool.name, *names) for a in self._of_tool.get(n, ()))
        return self.inner.call(tool, max_ref_depth=max_ref_depth, decide=decide, names=(*names, *aliases))

    def parse(self, text: str) -> ParsedCall:
        """The call written in `text`, with an alias replaced by the tool's name; raises CallParseError."""
        return self._canonical_call(self.inner.parse(text))

    def parse_all(self, text: str) -> list[ParsedCall]:
        """Every call written in `text` (one, where the inner format has no `parse_all`), aliases replaced."""
        parse_all = getattr(self.inner, "parse_all", None)
        calls = parse_all(text) if parse_all is not None else [self.inner.parse(text)]
        return [self._canonical_call(call) for call in calls]

    def _canonical_call(self, call: ParsedCall) -> ParsedCall:
        return replace(call, name=self.canonical.get(call.name, call.name))

    def render(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        """The canonical text of a call (under the tool's own name)."""
        return self.inner.render(tool, arguments)


def several_in_block(fmt: CallFormat) -> tuple[Wrapped, CallFormat] | None:
    """Where one pair of `fmt` may hold several calls (`Wrapped.several`): the wrapping and the format of one call
    inside it (its aliases kept); else None."""
    if isinstance(fmt, Aliased) and isinstance(fmt.inner, Wrapped) and fmt.inner.several:
        return fmt.inner, replace(fmt, inner=fmt.inner.inner)
    if isinstance(fmt, Wrapped) and fmt.several:
        return fmt, fmt.inner
    return None


def with_aliases(fmt: str | CallFormat, tools: Iterable[ToolSpec]) -> CallFormat:
    """`fmt` where every tool may also be named by its unique word-aligned suffixes (see `name_aliases`)."""
    fmt = get_format(fmt)
    table = tuple(name_aliases(t.name for t in tools).items())
    if isinstance(fmt, ParallelCalls):
        return replace(fmt, inner=Aliased(fmt.inner, table))
    return Aliased(fmt, table)


BARE_OPENING = '{"name": "'
"""What opens a JSON call written bare, with no tags or fence around it: its own first bytes, up to the tool name."""


def _hermes(inner: JsonCall, name: str) -> Wrapped:
    """Hermes/Qwen calls: between `<tool_call>` tags, in a Markdown JSON block, or bare (Qwen2.5-Coder writes all
    three; a bare object that does not start `{"name": "` is not read as a call)."""
    return Wrapped(inner, "<tool_call>\n", "\n</tool_call>", name=name, also=(("```json\n", "\n```"),),
                   bare=BARE_OPENING)


FORMATS: dict[str, CallFormat] = {
    "json": JsonCall(),
    "python": PythonCall(),
    "hermes": _hermes(JsonCall(), "hermes"),
    "hermes-lines": _hermes(JsonCall(syntax=JSON_LINES), "hermes-lines"),
    "toolken": ToolkenCall(),
    "react": ReactCall(),
    "llama31": ParallelCalls(JsonCall(name="llama31", arguments_key="parameters"), name="llama31", single=True),
    "mistral": ParallelCalls(JsonCall(), name="mistral"),
    "python-calls": ParallelCalls(PythonCall(), open="", close="", name="python-calls"),
}


LAYOUTS = ("compact", "lines")
"""How a guided JSON call may be laid out: compact (canonical spacing) or lines (pretty-printed too, as
Qwen2.5-Coder writes its Markdown JSON blocks; `tooldec.grammar.syntax.JSON_LINES`)."""


def format_in_layout(name: str, layout: str) -> str:
    """The name of format `name` with its JSON in `layout` (`hermes`, "lines" -> `hermes-lines`); raises
    ValueError for an unknown layout or a format that has no such variant."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown call layout {layout!r}; known: {', '.join(LAYOUTS)}")
    laid_out = name if layout == "compact" else f"{name}-{layout}"
    if laid_out not in FORMATS:
        with_layout = sorted(f for f in FORMATS if f.endswith(f"-{layout}"))
        raise ValueError(f"call layout {layout!r} exists for {', '.join(f.split('-')[0] for f in with_layout)} "
                         f"calls only, not {name!r}")
    return laid_out


def get_format(name: str | CallFormat) -> CallFormat:
    """A format by name (see FORMATS) or the format itself."""
    if not isinstance(name, str):
        return name
    try:
        return FORMATS[name]
    except KeyError:
        raise ToolDecError(f"unknown call format {name!r}; known: {', '.join(FORMATS)}") from None


_NAMING = (JsonCall, ToolkenCall, ReactCall)
"""Formats whose call of a tool under extra names is exactly the calls of tools with those names and the same
parameters (Python calls spell only identifiers among extra names, so their tools stay apart)."""


def _spells_every_name(fmt: CallFormat) -> bool:
    """Whether `fmt` (through the formats that wrap another) names a call by any given name alike."""
    while isinstance(fmt, Wrapped | Aliased | ParallelCalls):
        fmt = fmt.inner
    return isinstance(fmt, _NAMING)


def call_groups(tools: Iterable[ToolSpec], fmt: CallFormat) -> list[list[ToolSpec]]:
    """The tools in groups whose calls differ in the tool's name only (the same parameters schema), each in the
    order of its first tool: a call of any tool of a group is `group_call` of it, one argument machine behind
    the group's names (FuncQA's 13 tools have 4 schemas, KAMEL's 234 have 51). One tool a group in a format
    that spells names apart."""
    if not _spells_every_name(fmt):
        return [[tool] for tool in tools]
    groups: dict[str, list[ToolSpec]] = {}
    for tool in tools:
        groups.setdefault(json.dumps(tool.parameters, default=str), []).append(tool)
    return list(groups.values())


def group_call(group: Sequence[ToolSpec], fmt: CallFormat, *, decide: Decide, max_ref_depth: int = 3) -> Node:
    """IR of a call of any tool of a `call_groups` group (the first tool's call under every name of the group);
    raises EmptyGrammarError, naming the first tool, when no call can satisfy their parameters."""
    first = group[0]
    node = fmt.call(first, max_ref_depth=max_ref_depth, decide=decide, names=tuple(t.name for t in group[1:]))
    if node == NOTHING:
        raise EmptyGrammarError("no value satisfies the parameters schema", tool=first.name, path="#/parameters")
    return node


def tools_grammar(tools: Iterable[ToolSpec], fmt: CallFormat, *, decide: Decide, max_ref_depth: int = 3) -> Node:
    """IR of a call of any one of the tools; raises EmptyGrammarError for a tool that no call can satisfy.
    `decide` builds the small languages a schema's keys are checked against (see SchemaCompiler)."""
    block = several_in_block(fmt)
    one = fmt if block is None else block[1]
    calls = [group_call(g, one, decide=decide, max_ref_depth=max_ref_depth) for g in call_groups(tools, one)]
    if block is not None:
        return block[0].block(alt(*calls))
    around = getattr(fmt, "around", None)
    return around(alt(*calls)) if around is not None else alt(*calls)
