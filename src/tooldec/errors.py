"""Errors raised by tooldec; each carries the tool name and JSON path it concerns, where there is one."""

from __future__ import annotations


class ToolDecError(Exception):
    """Base class of every error tooldec raises on purpose."""


def _where(tool: str | None, path: str | None) -> str:
    parts = []
    if tool is not None:
        parts.append(f"tool {tool!r}")
    if path is not None:
        parts.append(f"at {path}")
    return (" (" + ", ".join(parts) + ")") if parts else ""


class ToolSpecError(ToolDecError, ValueError):
    """A tool specification is malformed: duplicate or uncallable name, bad schema, unreadable document."""

    def __init__(self, message: str, *, tool: str | None = None, path: str | None = None) -> None:
        self.tool = tool
        self.path = path
        self.reason = message
        super().__init__(message + _where(tool, path))


class UnsupportedSchemaError(ToolDecError, ValueError):
    """A JSON Schema keyword (or value of it) that tooldec cannot enforce; never silently ignored."""

    def __init__(self, keyword: str, *, path: str = "#", tool: str | None = None, detail: str = "") -> None:
        self.keyword = keyword
        self.path = path
        self.tool = tool
        self.detail = detail
        msg = f"unsupported schema keyword {keyword!r}" + (f": {detail}" if detail else "")
        super().__init__(msg + _where(tool, path))


class SchemaError(ToolSpecError):
    """A JSON Schema that is not valid JSON Schema (wrong keyword types, unresolvable $ref...)."""


class EmptyGrammarError(ToolDecError, ValueError):
    """Schemas that admit no value at all, so no call or instance could ever be generated."""

    def __init__(self, message: str, *, tool: str | None = None, path: str | None = None) -> None:
        self.tool = tool
        self.path = path
        super().__init__(message + _where(tool, path))


class VocabularyError(ToolDecError, ValueError):
    """A tokenizer whose tokens cannot be mapped to bytes, or a missing EOS token."""


class TokenRejectedError(ToolDecError, ValueError):
    """A token that the guide does not allow in its current state."""

    def __init__(self, token_id: int, state: int, text: bytes | None = None) -> None:
        self.token_id = token_id
        self.state = state
        shown = f" ({text!r})" if text is not None else ""
        super().__init__(f"token {token_id}{shown} is not allowed in state {state}")


class GrammarError(ToolDecError, ValueError):
    """A Lark or GBNF grammar that cannot be read, or that uses a construct tooldec does not enforce exactly.

    `line` and `column` are 1-based positions in the grammar text, None where the place is unknown; `tool` names the
    custom tool whose input format the grammar is, where it is one.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 tool: str | None = None) -> None:
        self.reason = message
        self.line = line
        self.column = column
        self.tool = tool
        where = "" if line is None else f" (line {line}" + ("" if column is None else f", column {column}") + ")"
        super().__init__(message + where)
