"""The syntax verdicts of a generation: the stretches where the model started a call (`Attempt`, one finder per
call format), each read and checked against the tools, a call cut off by the token limit marked `truncated`.

Chat calls (BFCL) are read by the chat layer's one reader in every mode (`tooldec.chat.reader`: tags, fences,
bare objects and lists); toolken and ReAct calls by the format's own parser. Fuzzy decoding maps every tool name
to the nearest existing one before it is scored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tooldec.chat.reader import call_blocks
from tooldec.eval.metrics import SyntaxCheck, SyntaxChecker, fuzzy_call
from tooldec.grammar.calls import Aliased, CallFormat, CallParseError, ParsedCall, get_format, with_aliases
from tooldec.specs import ToolSet, ToolSpec


@dataclass
class Attempt:
    """A stretch of generated text where the model started a call, and whether the token limit cut it off."""

    text: str
    complete: bool


Parser = Callable[[str], ParsedCall]


def classify(checker: SyntaxChecker, attempt: Attempt, *, fuzzy: bool, parse: Parser | None = None) -> SyntaxCheck:
    """The verdict on one call attempt (read by `parse`, else the format's parser); fuzzy maps the name first."""
    if not attempt.complete:
        return _truncated(checker, attempt.text)
    try:
        call = (parse or checker.format.parse)(attempt.text)
    except CallParseError as err:
        return SyntaxCheck("format", str(err))
    if fuzzy and isinstance(call.name, str):
        call = fuzzy_call(call, checker.tools)
    return checker.check(call)


_PARTIAL_NAME = {
    "toolken": re.compile(r"<([^>(]*)(>)?"),
    "react": re.compile(r"Action: *([^\n]*)(\n)?"),
}
_PARTIAL_JSON_NAME = re.compile(r'"name"\s*:\s*"([^"]*)(")?')


def _truncated(checker: SyntaxChecker, text: str) -> SyntaxCheck:
    """A call cut off by the token limit: a name error if its (partial) name fits no tool, else `truncated`."""
    m = _PARTIAL_NAME.get(checker.format.name, _PARTIAL_JSON_NAME).search(text)
    if m is not None:
        name, closed = m.group(1).strip(), m.group(2) is not None
        names = [*checker.tools.names, *(checker.format.canonical if isinstance(checker.format, Aliased) else ())]
        if (closed and name not in names) or not any(n.startswith(name) for n in names):
            return SyntaxCheck("name", f"no tool named {name!r} (cut off by the token limit)")
    return SyntaxCheck("truncated", "cut off by the token limit")


def verdicts(
    checker: SyntaxChecker, attempts: Sequence[Attempt], *, fuzzy: bool, parse: Parser | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The item's syntax error (first error among its calls) and one verdict per attempt."""
    checks = [classify(checker, a, fuzzy=fuzzy, parse=parse) for a in attempts]
    rows = [
        {"text": a.text, "kind": c.kind, "message": c.message[:200]} for a, c in zip(attempts, checks, strict=True)
    ]
    first = next((c.kind for c in checks if c.kind not in (None, "truncated")), None)
    return first, rows


def toolken_attempts(text: str, truncated: bool) -> list[Attempt]:
    """Every `<name` in the text up to its `=`; an unfinished last one is cut off when `truncated`."""
    out = []
    for m in re.finditer(r"<[A-Za-z_]", text):
        end = text.find("=", m.start())
        if end < 0:
            out.append(Attempt(text[m.start() :].rstrip(), not truncated))
        else:
            out.append(Attempt(text[m.start() : end + 1], True))
    return out


def react_attempts(text: str, truncated: bool) -> list[Attempt]:
    """Every `Action:` up to the next Observation/Thought/Action, as one newline-ended action text; the last one,
    when the token limit cut it off, as written (a newline added there would close a name the model never
    finished: `Action: ` would read as an empty name)."""
    starts = [m.start() for m in re.finditer(r"Action:", text)]
    out = []
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else len(text)
        chunk = text[start:stop]
        cut = min((p for p in (chunk.find("\nObservation:"), chunk.find("\nThought:")) if p >= 0), default=-1)
        ended = cut >= 0 or i + 1 < len(starts)
        chunk = chunk[:cut] if cut >= 0 else chunk
        complete = ended or not truncated
        out.append(Attempt(chunk.rstrip("\n") + "\n" if complete else chunk, complete))
    return out


def chat_attempts(text: str, truncated: bool) -> list[Attempt]:
    """Every call block of a chat answer, in every shape (`tooldec.chat.reader.call_blocks`), the same in every
    decoding mode; a block the text ends inside is cut off when `truncated`, else complete (and unreadable)."""
    return [Attempt(text[b.start : b.end].rstrip(), not (b.cut and truncated)) for b in call_blocks(text)]


def call_format(fmt: str, tools: ToolSet | Sequence[ToolSpec], decoding: str) -> CallFormat:
    """The format ToolDec's calls are compiled and read in: `fmt` with the tools' suffix aliases; others' `fmt`."""
    return with_aliases(fmt, tools) if decoding == "tooldec" else get_format(fmt)
