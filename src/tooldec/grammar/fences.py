"""Markdown code fences in a model's free text: where a bare JSON call cannot start.

A model that writes code (```` ```python ````) may write a dict literal `{"name": ...}` in it; that is code, not a
call. Inside a fenced block whose info string names another language than JSON, a bare call opening opens
nothing: the guide's trigger watch (`CallController`) and the reader of calls (`chat.reader`) both follow this
rule through the one scanner here. A fence without a language, or a JSON one written as text, leaves bare
openings as they are.

The scanner is a small automaton over characters, stepped a piece of text at a time (a token's text), with an
immutable state so that a decoder can keep it per token and roll it back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

JSON_LANGUAGES = frozenset(("json", "jsonc", "json5", "jsonl"))
"""Info strings of a fence whose content is JSON (bare calls in it are calls)."""
_INFO_MAX = 32
"""Characters of an info string kept; a longer one is not a language name (prose after three backticks)."""

OUT, INFO, CODE, PLAIN = 0, 1, 2, 3
"""Outside any fence; reading a fence's info string; inside a block of another language; inside a block without
a language or of JSON."""


class FenceState(NamedTuple):
    """Where the text so far stands: `mode` (OUT, INFO, CODE, PLAIN), backticks in a row at its end, and the info
    string read so far (in INFO)."""

    mode: int = OUT
    ticks: int = 0
    info: str = ""

    @property
    def in_code(self) -> bool:
        """Whether the text is inside a fenced block of another language than JSON."""
        return self.mode == CODE


START = FenceState()


def _info_end(info: str) -> int:
    """The block a fence opens once its info string has ended with a newline."""
    words = info.split()
    language = words[0].lower() if words else ""
    return CODE if language and language not in JSON_LANGUAGES else PLAIN


def step(state: FenceState, text: str) -> FenceState:
    """The state after `text` (a token's text: bytes decoded as Latin-1 work as well, only ASCII matters)."""
    if state.mode != INFO and not state.ticks and "`" not in text:
        return state
    mode, ticks, info = state
    for ch in text:
        if ch == "`":
            ticks += 1
            if ticks == 3:  # a fence: it closes the block it is in, else opens one (its info string follows)
                mode, ticks, info = OUT if mode in (CODE, PLAIN) else INFO, 0, ""
            continue
        if ticks and mode == INFO:  # a backtick in the info string: inline code, not a fence
            mode, info = OUT, ""
        ticks = 0
        if mode == INFO:
            if ch == "\n":
                mode, info = _info_end(info), ""
            elif len(info) < _INFO_MAX:
                info += ch
            else:
                mode, info = OUT, ""
    return FenceState(mode, ticks, info)


_PIECES = re.compile(r"`+|\n|[^`\n]+")
"""A text cut where the scanner's state may change: runs of backticks, newlines, and the text between."""


def code_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) of the content of each fenced block of another language than JSON in `text` (the same
    scanner as `step`); a block the text ends inside runs to its end."""
    spans: list[tuple[int, int]] = []
    state, opened = START, 0
    for piece in _PIECES.finditer(text):
        was = state.in_code
        state = step(state, piece.group())
        if state.in_code and not was:
            opened = piece.end()
        elif was and not state.in_code:
            spans.append((opened, piece.start()))
    if state.in_code:
        spans.append((opened, len(text)))
    return spans


def in_spans(position: int, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether `position` lies inside one of `spans`."""
    return any(start <= position < end for start, end in spans)
