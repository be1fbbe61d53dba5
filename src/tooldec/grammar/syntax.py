"""Value syntaxes: how a JSON value is spelled in a call (JSON, or Python literals), canonically, and the layout a
grammar admits around its containers' members."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from tooldec.grammar.ir import Node, Repeat, alt, lit, opt, seq


@dataclass(frozen=True)
class ValueSyntax:
    """Literal spellings of one syntax; `python` switches strings to the Python-safe escape set."""

    name: str
    true: str
    false: str
    null: str
    python: bool
    item_sep: str = ", "
    key_sep: str = ": "
    line_indent: int = 0
    """0: one compact layout. n > 0: a container may also break its lines, the way pretty-printed JSON does: a
    newline and at most n spaces after `{` or `[`, after `,` (in place of the space) and before `}` or `]`. Each gap
    is bounded, so a guided value still always ends; the canonical spelling stays the compact one."""

    def dumps(self, value: Any) -> str:
        """The canonical spelling of a value (the one the grammar generates)."""
        if value is None:
            return self.null
        if value is True:
            return self.true
        if value is False:
            return self.false
        if isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{value!r} has no JSON spelling")
            return json.dumps(value)
        if isinstance(value, str):
            return encode_basestring(value)  # json.dumps(value, ensure_ascii=False), without building an encoder
        if isinstance(value, dict):
            inner = self.item_sep.join(
                encode_basestring(str(k)) + self.key_sep + self.dumps(v) for k, v in value.items()
            )
            return "{" + inner + "}"
        if isinstance(value, (list, tuple)):
            return "[" + self.item_sep.join(self.dumps(v) for v in value) + "]"
        raise TypeError(f"cannot spell a {type(value).__name__} as a {self.name} literal")

    def _line_break(self) -> Node:
        return seq(lit("\n"), Repeat(lit(" "), 0, self.line_indent))

    def opening(self, bracket: str) -> Node:
        """A container's opening bracket and the gap after it."""
        return seq(lit(bracket), opt(self._line_break())) if self.line_indent else lit(bracket)

    def closing(self, bracket: str) -> Node:
        """The gap before a container's closing bracket, and the bracket."""
        return seq(opt(self._line_break()), lit(bracket)) if self.line_indent else lit(bracket)

    def separator(self) -> Node:
        """What comes between two members of a container."""
        sep = lit(self.item_sep)
        return alt(sep, seq(lit(self.item_sep.rstrip()), self._line_break())) if self.line_indent else sep


JSON = ValueSyntax("json", "true", "false", "null", python=False)
PYTHON = ValueSyntax("python", "True", "False", "None", python=True)
LINE_INDENT = 16
"""The widest indent a line-broken JSON layout admits: pretty-printed calls nested four levels at four spaces."""
JSON_LINES = ValueSyntax("json-lines", "true", "false", "null", python=False, line_indent=LINE_INDENT)
"""JSON that may also be written pretty-printed (Qwen2.5-Coder writes its ```json blocks that way)."""
