"""The one reader of calls in a model's text, guided or free, in every shape a chat model writes them.

A call opens with `<tool_call>` (closed by `</tool_call>`), a Markdown ```` ```json ```` block (closed by
```` ``` ````), Mistral's `[TOOL_CALLS]`, or bare: a JSON object whose first key is `"name"`, alone or in a JSON
list. A bare opening inside a fenced code block of another language (```` ```python ````) is code, not a call
(`grammar.fences`, the rule the guide's trigger watch follows too). Its JSON ends where the JSON value does (a
closing inside a string argument closes nothing): a value whose brackets and strings are still open at the end
of the text is `cut` there; a malformed one ends at the closing after its brackets, or the next opening. A block
between tags or in a fence may hold several call objects one after another (a comma or whitespace apart), read
as one list. The object is read leniently: `arguments` or `parameters`, arguments as an object or as a JSON
string of one; a list holds several calls. Python calls (`f(a=1), g(b=2)`, the `python` syntax) are the whole
text. The serving output streams with the same pieces (`CALL_HEAD`, `json_value_end`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tooldec.chat.syntax import FENCE_OPEN, ChatSyntax
from tooldec.grammar.calls import CallParseError, ParsedCall, get_format, new_calls
from tooldec.grammar.fences import code_spans, in_spans

TAGS = ("<tool_call>", "</tool_call>")
FENCE = (FENCE_OPEN, "```")
MISTRAL = ("[TOOL_CALLS]", "")


@dataclass(frozen=True)
class Shape:
    """One way a call is written: the regex of its opening, its closing text ("" for none), and whether the opening
    is the JSON's own start (a bare object or list) rather than text before it."""

    opening: str
    closing: str = ""
    bare: bool = False

    @property
    def pattern(self) -> str:
        """The regex of the opening."""
        return self.opening if self.bare else re.escape(self.opening)


BARE_OBJECT = Shape(r'\{\s*"name"\s*:', bare=True)
BARE_LIST = Shape(r'\[\s*\{\s*"name"\s*:', bare=True)
SHAPES: tuple[Shape, ...] = (Shape(*TAGS), Shape(*FENCE), Shape(*MISTRAL), BARE_LIST, BARE_OBJECT)
"""Every shape of a JSON call: tags, a fence, Mistral's token, a bare list, a bare object."""
WRAPPED: tuple[Shape, ...] = (Shape(*TAGS), Shape(*FENCE))
"""The shapes with text around the call (what `tool_choice` "none" leaves as content: a fence)."""

CALL_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)')
"""The head of a JSON call in every syntax, canonical or pretty-printed, up to where its arguments begin: a
streamed call is announced once its name is written whole."""

_JSON = json.JSONDecoder()
_NEXT_CALL = re.compile(r'\s*,?\s*(?=\{\s*"name"\s*:)')
"""What leads from one call to the next inside one block (Qwen2.5-Coder writes `{...},\\n{...}` in one
`<tool_call>` block): their block's JSON is then the list of them."""


@dataclass(frozen=True)
class CallBlock:
    """One call (or list of calls) in a text: where its opening starts and the block ends (after its closing when
    written), its JSON as far as written, whether that JSON is whole (`complete`), whether the closing was written
    (`closed`), and whether the text ended inside the block (`cut`)."""

    start: int
    json: str
    complete: bool
    end: int
    closed: bool = False
    cut: bool = False


def _find(text: str, pos: int, shapes: Sequence[Shape], code: Sequence[tuple[int, int]] = ()) -> tuple[int, int, Shape] | None:
    """The first opening at or after `pos`: (start, end of the opening, its shape); the first shape wins a tie.
    A bare opening inside one of the `code` spans (`fences.code_spans`) is code, not a call."""
    best: tuple[int, int, Shape] | None = None
    for shape in shapes:
        found = re.compile(shape.pattern).finditer(text, pos)
        m = next((m for m in found if not (shape.bare and in_spans(m.start(), code))), None)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), m.end(), shape)
    return best


def call_blocks(text: str, shapes: Sequence[Shape] = SHAPES) -> list[CallBlock]:
    """The call blocks in `text`, each opened by one of `shapes`; the last may be cut off by the text's end."""
    out: list[CallBlock] = []
    pos = 0
    code = code_spans(text) if any(s.bare for s in shapes) else []
    while (found := _find(text, pos, shapes, code)) is not None:
        start, opened, shape = found
        body = start if shape.bare else opened
        while body < len(text) and text[body].isspace():
            body += 1
        spans = _run_from(text, body, several=bool(shape.closing)) if text.startswith(("{", "["), body) else []
        if spans:  # whole JSON values: one, or in a block several (one cut off or malformed is a block of its own)
            values = [text[a:b] for a, b in spans]
            end = spans[-1][1]
            after = len(text) - len(text[end:].lstrip())
            closed = bool(shape.closing) and text.startswith(shape.closing, after)
            pos = after + len(shape.closing) if closed else end
            value = values[0] if len(values) == 1 else "[" + ", ".join(values) + "]"
            out.append(CallBlock(start, value, True, pos, closed))
            continue
        scanned = json_value_end(text, body) if text.startswith(("{", "["), body) else None
        if scanned is None and text.startswith(("{", "["), body):  # the value runs on to the end of the text
            out.append(CallBlock(start, text[body:], False, len(text), cut=True))
            return out
        nxt = _find(text, max(opened, scanned or body + 1), shapes, code)  # not the object's own start again
        close_at = text.find(shape.closing, scanned or opened) if shape.closing else -1
        if close_at >= 0 and (nxt is None or close_at < nxt[0]):
            pos = close_at + len(shape.closing)
            out.append(CallBlock(start, text[body:close_at].rstrip(), False, pos, True))
        elif nxt is not None:
            pos = nxt[0]
            out.append(CallBlock(start, text[body:pos].rstrip(), False, pos))
        else:
            out.append(CallBlock(start, text[body:], False, len(text), cut=True))
            return out
    return out


def json_value_end(text: str, start: int) -> int | None:
    """Where the JSON object or array starting at `text[start]` ends (the index after it), None if it does not
    end within `text` (a scan that also works on a value still being written)."""
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def json_string_prefix(text: str, start: int) -> tuple[str, int | None]:
    """The value of the JSON string opening at `text[start]` (a quote) as far as it is written, up to its last
    whole escape, and the index after its closing quote (None while it is not closed): a custom tool's input
    streamed as it is written."""
    i, end = start + 1, None
    whole = i  # where the text read so far ends on a whole character or escape
    while i < len(text):
        c = text[i]
        if c == '"':
            end = whole = i
            break
        if c == "\\":
            step = 6 if text.startswith("u", i + 1) else 2
            if i + step > len(text):
                break
            i += step
        else:
            i += 1
        whole = i
    return json.loads(text[start:whole] + '"'), None if end is None else end + 1


def _from_object(obj: Any) -> ParsedCall:
    """A call object read leniently: a string `name`, arguments under `arguments` or `parameters` (an object, or a
    JSON string of one); raises CallParseError."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise CallParseError(f"not a call object: {json.dumps(obj)[:80]!r}")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            raise CallParseError(f"arguments are not JSON: {args[:80]!r}") from exc
    if not isinstance(args, dict):
        raise CallParseError("arguments are not an object")
    return ParsedCall(obj["name"], args)


def calls_in_json(text: str) -> list[ParsedCall]:
    """The calls of one block's JSON: an object, a non-empty list of them, or call objects one after another (a
    comma or whitespace apart, as in one `<tool_call>` block); raises CallParseError."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        value = _run_of_calls(text.strip())
        if value is None:
            raise CallParseError(f"not JSON: {text[:80]!r}") from exc
    if isinstance(value, list):
        if not value:
            raise CallParseError("an empty list of calls")
        return [_from_object(item) for item in value]
    return [_from_object(value)]


def _run_from(text: str, at: int, *, several: bool = True) -> list[tuple[int, int]]:
    """Where the whole JSON values from `text[at]` on start and end: the first, then (with `several`) each call
    object `_NEXT_CALL` after the one before, up to one cut off or malformed (none: the first is not whole)."""
    spans: list[tuple[int, int]] = []
    while True:
        try:
            end = _JSON.raw_decode(text, at)[1]
        except ValueError:
            return spans
        spans.append((at, end))
        more = _NEXT_CALL.match(text, end) if several else None
        if more is None:
            return spans
        at = more.end()


def _run_of_calls(text: str) -> list[Any] | None:
    """The objects of two or more call objects written one after another (`_NEXT_CALL` apart) that make up all of
    `text`, or None where `text` is not such a run."""
    spans = _run_from(text, 0)
    if len(spans) < 2 or spans[-1][1] != len(text):
        return None
    return [json.loads(text[a:b]) for a, b in spans]


def distinct_blocks(blocks: Sequence[CallBlock], names: Mapping[str, str] | None = None) -> list[CallBlock]:
    """The blocks but those that only repeat calls of earlier ones, tools named as `names` maps an alias (as the
    guided policy ends a turn at such a repeat: `CallController`). A block still being written whose JSON so far
    begins an earlier block's is held back (left out) until it differs, so a stream does not announce a call that
    proves a repeat; one written otherwise than the call it repeats (an alias, another layout) shows until whole."""
    names = names or {}
    kept: list[CallBlock] = []
    made: list[ParsedCall] = []
    for block in blocks:
        if not block.complete:
            if not any(k.complete and k.json.startswith(block.json) for k in kept):
                kept.append(block)
            continue
        try:
            calls = [replace(c, name=names.get(c.name, c.name)) for c in calls_in_json(block.json)]
        except CallParseError:
            kept.append(block)
            continue
        if new_calls(calls, made):
            made += calls
            kept.append(block)
    return kept


def parse_calls(text: str, shapes: Sequence[Shape] = SHAPES) -> list[ParsedCall]:
    """The calls of one written call, its opening and closing included or not (`<tool_call>\\n{...}\\n</tool_call>`,
    `{...}`, `[{...}, {...}]`); raises CallParseError."""
    body = text.strip()
    for shape in shapes:
        if shape.bare:
            continue
        if body.startswith(shape.opening) or (shape.closing and body.endswith(shape.closing)):
            body = body.removeprefix(shape.opening)
            body = body.removesuffix(shape.closing) if shape.closing else body
            body = body.strip()
            break
    return calls_in_json(body)


def parse_call(text: str) -> ParsedCall:
    """The first call of one written call (see parse_calls); raises CallParseError."""
    return parse_calls(text)[0]


def parse_python_calls(text: str) -> list[ParsedCall]:
    """Python calls `f(a=1), g(b=2)` (in brackets or not) with literal keyword arguments; raises CallParseError."""
    body = text.strip()
    try:
        node = ast.parse(body, mode="eval").body
    except SyntaxError as exc:
        raise CallParseError(f"not Python calls: {body[:80]!r}") from exc
    items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    fmt = get_format("python")
    calls = []
    for item in items:
        if not isinstance(item, ast.Call):
            raise CallParseError(f"not a call: {ast.get_source_segment(body, item)!r}")
        calls.append(fmt.parse(ast.get_source_segment(body, item) or ""))
    if not calls:
        raise CallParseError("no call")
    return calls


@dataclass
class Reading:
    """What a text holds: its calls (tool names canonical), the errors of call blocks that could not be read, the
    content before the first call, and the blocks themselves."""

    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    content: str = ""
    blocks: list[CallBlock] = field(default_factory=list)


def read_calls(text: str, syntax: ChatSyntax | None = None, *, names: Mapping[str, str] | None = None,
               shapes: Sequence[Shape] = SHAPES) -> Reading:
    """Every call in `text`, written in any JSON shape (or, for the `python` syntax, the whole text as Python
    calls); `names` maps an alias to its tool's name. A block cut off by the text's end is not an error; one that only
    repeats earlier calls is left out (`distinct_blocks`), and so is a repeated call in a block of several."""
    names = names or {}
    if syntax is not None and syntax.family == "python":
        try:
            calls = parse_python_calls(text)
        except CallParseError as exc:
            return Reading([], [str(exc)], text.strip())
        return Reading([replace(c, name=names.get(c.name, c.name)) for c in calls])
    reading = Reading(blocks=distinct_blocks(call_blocks(text, shapes), names))
    reading.content = text[: reading.blocks[0].start].strip() if reading.blocks else text.strip()
    for block in reading.blocks:
        if block.cut and not block.complete:
            continue
        try:
            calls = [replace(c, name=names.get(c.name, c.name)) for c in calls_in_json(block.json)]
        except CallParseError as exc:
            reading.errors.append(str(exc))
            continue
        reading.calls += new_calls(calls, reading.calls)  # a block of several may repeat a call
    return reading


def call_at_end(text: str) -> str | None:
    """The text of the call block `text` ends with, once its JSON is whole and its closing (if its shape has one)
    written; None otherwise (for a free decoder that reports calls as they are written)."""
    blocks = call_blocks(text)
    if not blocks:
        return None
    last = blocks[-1]
    if last.cut or last.end != len(text.rstrip()) or not (last.closed or (last.complete and _closes_bare(text, last))):
        return None
    return text[last.start : last.end]


def _closes_bare(text: str, block: CallBlock) -> bool:
    """Whether a complete block with no closing written is of a shape that has none (bare, or Mistral's list)."""
    return not any(s.closing and text.startswith(s.opening, block.start) for s in SHAPES if not s.bare)


def opening_overlap(text: str, shapes: Sequence[Shape] = SHAPES) -> int:
    """How many characters at the end of `text` could begin an opening (content to hold back while streaming)."""
    literal = [s.opening for s in shapes if not s.bare] + [o for s in shapes if s.bare for o in _bare_openings(s)]
    return max((k for o in literal for k in range(1, len(o)) if text.endswith(o[:k])), default=0)


def _bare_openings(shape: Shape) -> tuple[str, ...]:
    """The canonical text of a bare opening (`{"name":`), what streaming holds back."""
    return ('[{"name":',) if shape is BARE_LIST else ('{"name":',)
