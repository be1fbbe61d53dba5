"""Value syntaxes: how a JSON value is spelled in a call (JSON, or Python literals), canonically."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any


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


JSON = ValueSyntax("json", "true", "false", "null", python=False)
PYTHON = ValueSyntax("python", "True", "False", "None", python=True)
