"""Read tool lists in the JSON shapes people already have: OpenAI (function and custom tools), MCP, BFCL, and files
holding them."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from tooldec.errors import ToolSpecError
from tooldec.specs.from_openapi import from_openapi
from tooldec.specs.normalize import join_pointer, normalize_schema
from tooldec.specs.toolspec import NO_PARAMETERS, InputFormat, ToolSpec

# Where each format keeps the argument schema: OpenAI/BFCL, MCP, Anthropic.
_SCHEMA_KEYS = ("parameters", "inputSchema", "input_schema")


def from_openai_tools(data: Any) -> list[ToolSpec]:
    """Convert OpenAI tools, bare functions, MCP tools or a BFCL entry into ToolSpecs, in order."""
    return [_tool(item, path) for item, path in _tool_items(data)]


def load_tools_file(path: str | os.PathLike[str]) -> list[ToolSpec]:
    """Load tools from a JSON file: an OpenAI/MCP tool list, one BFCL entry, or an OpenAPI document."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise ToolSpecError(f"cannot read {os.fspath(path)!r}: {err}") from err
    data = _parse_json(text, os.fspath(path))
    if isinstance(data, dict) and ("openapi" in data or "swagger" in data):
        return from_openapi(data)
    return from_openai_tools(data)


def _parse_json(text: str, filename: str) -> Any:
    """Parse a JSON document; a JSON Lines file with several entries is refused with a hint."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and _all_json(lines):
            raise ToolSpecError(
                f"{filename!r} holds {len(lines)} JSON lines (a BFCL data file?); pass a file with one entry"
            ) from err
        raise ToolSpecError(f"{filename!r} is not valid JSON: {err}") from err


def _all_json(lines: list[str]) -> bool:
    """Tell whether every line parses as JSON on its own."""
    try:
        for line in lines:
            json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _tool_items(data: Any) -> list[tuple[Any, str]]:
    """Find the tool objects in `data`, each with its JSON pointer."""
    if isinstance(data, list):
        return _listed(data, "#")
    if not isinstance(data, dict):
        raise ToolSpecError(f"expected a list or object of tools, not {type(data).__name__}", path="#")
    if "tools" in data:
        return _listed(data["tools"], "#/tools")
    if data.get("type") == "function" or "name" in data:
        return [(data, "#")]
    if "function" in data:
        return _listed(data["function"], "#/function")
    raise ToolSpecError(
        'no tools found: expected a list, or an object with "tools", "function" or "name"', path="#"
    )


def _listed(value: Any, path: str) -> list[tuple[Any, str]]:
    """The tools of a list with their pointers; a single tool object stands for a list of one."""
    if isinstance(value, list):
        return [(item, join_pointer(path, i)) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return [(value, path)]
    raise ToolSpecError("expected a list of tools or a single tool object", path=path)


def _tool(item: Any, path: str) -> ToolSpec:
    """Convert one tool object found at `path`, reporting errors at their place in the input."""
    if not isinstance(item, dict):
        raise ToolSpecError(f"a tool must be an object, not {type(item).__name__}", path=path)
    fn, fn_path = item, path
    if item.get("type") == "custom":
        return _custom_tool(item, path)
    if "type" in item:
        if item["type"] != "function":
            raise ToolSpecError(f"unsupported tool type {item['type']!r}", path=join_pointer(path, "type"))
        if "function" in item:
            fn, fn_path = item["function"], join_pointer(path, "function")
            if not isinstance(fn, dict):
                raise ToolSpecError("'function' must be an object", path=fn_path)
    name = fn.get("name")
    if not isinstance(name, str):
        raise ToolSpecError("tool has no name", path=join_pointer(fn_path, "name"))
    description = fn.get("description") or ""
    key = next((k for k in _SCHEMA_KEYS if k in fn), _SCHEMA_KEYS[0])
    schema_path = join_pointer(fn_path, key)
    raw = fn.get(key, {})
    if isinstance(raw, dict) and "type" not in raw:
        raw = {"type": "object", **raw}
    parameters = normalize_schema(raw, tool=name, path=schema_path)
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    try:
        return ToolSpec(name, description, parameters)
    except ToolSpecError as err:
        where = err.path or "#"
        if where.startswith("#/parameters"):
            where = schema_path + where[len("#/parameters") :]
        else:
            where = fn_path + where[1:]
        raise ToolSpecError(err.reason, tool=err.tool, path=where) from err


def _custom_tool(item: dict[str, Any], path: str) -> ToolSpec:
    """An OpenAI custom tool `{"type": "custom", "custom": {"name", "description", "format"}}`: its format is
    `{"type": "text"}` (the default), `{"type": "grammar", "grammar": {"syntax": "lark" | "regex", "definition"}}`,
    or the same with `syntax` and `definition` beside `type`."""
    body, body_path = item.get("custom"), join_pointer(path, "custom")
    if not isinstance(body, dict):
        raise ToolSpecError("a custom tool needs a 'custom' object", path=body_path)
    name = body.get("name")
    if not isinstance(name, str):
        raise ToolSpecError("tool has no name", path=join_pointer(body_path, "name"))
    fmt_path = join_pointer(body_path, "format")
    fmt = body.get("format", {"type": "text"})
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise ToolSpecError('a custom tool format is {"type": "text"} or {"type": "grammar", ...}',
                            tool=name, path=fmt_path)
    if fmt["type"] == "text":
        input_format = InputFormat()
    else:
        grammar, grammar_path = fmt.get("grammar", fmt), join_pointer(fmt_path, "grammar") if "grammar" in fmt else fmt_path
        if not isinstance(grammar, dict):
            raise ToolSpecError("a grammar format needs a 'grammar' object", tool=name, path=grammar_path)
        syntax, definition = grammar.get("syntax"), grammar.get("definition")
        if syntax not in ("lark", "regex"):
            raise ToolSpecError(f"grammar syntax must be lark or regex, not {syntax!r}", tool=name,
                                path=join_pointer(grammar_path, "syntax"))
        if not isinstance(definition, str):
            raise ToolSpecError("grammar definition must be a string", tool=name,
                                path=join_pointer(grammar_path, "definition"))
        input_format = InputFormat(syntax, definition)
    try:
        return ToolSpec(name, str(body.get("description") or ""), copy.deepcopy(NO_PARAMETERS),
                        input_format=input_format)
    except ToolSpecError as err:
        raise ToolSpecError(err.reason, tool=err.tool, path=body_path + (err.path or "#")[1:]) from err
