"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with a 4xx status for bad input.

Every problem a request can have becomes an `APIError` with the parameter it concerns (`tools[0].function.
parameters.properties.unit`, `messages[2].tool_call_id`, `max_tokens`); the app turns framework errors (body
validation, unknown routes, wrong methods) into the same shape, and anything unexpected into a 500 that names
the exception without taking the server down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tooldec.errors import EmptyGrammarError, ToolSpecError, UnsupportedSchemaError


class APIError(Exception):
    """An error answered to the client: HTTP status, message, OpenAI error type, parameter and code."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        """`param` names the request field at fault (dotted, with [i] for list items)."""
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON error object."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def param_path(parts: Sequence[str | int]) -> str:
    """`["tools", 0, "function", "name"]` → `tools[0].function.name`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def pointer_param(prefix: str, pointer: str | None) -> str:
    """A JSON pointer inside a request field (`#/0/function/parameters/x`) as a parameter path."""
    if not pointer or pointer == "#":
        return prefix
    parts: list[str | int] = []
    for raw in pointer.lstrip("#").strip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    rest = param_path(parts)
    return prefix + (rest if rest.startswith("[") else "." + rest)


def tool_error(exc: Exception, prefix: str = "tools") -> APIError:
    """A tool-set compile error (bad schema, unsupported keyword, no valid call) as a 400 naming its place."""
    path = getattr(exc, "path", None)
    if isinstance(exc, UnsupportedSchemaError):
        code = "unsupported_schema_keyword"
    elif isinstance(exc, EmptyGrammarError):
        code = "unsatisfiable_schema"
    elif isinstance(exc, ToolSpecError):
        code = "invalid_tool_schema"
    else:
        code = "invalid_tool_schema"
    return APIError(str(exc), param=pointer_param(prefix, path), code=code)


def grammar_error(exc: Exception, key: str = "grammar") -> APIError:
    """A grammar (or regex, or choice) that cannot be read or guided (`GrammarError`: its message names the line and
    column) as a 400 naming `structured_outputs.<key>`."""
    return APIError(str(exc), param=f"structured_outputs.{key}", code="invalid_grammar")
