"""Run Python tools with parsed arguments; a failing tool becomes an error observation, never a crash."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import jsonschema

from tooldec.grammar.calls import CallParseError, ParsedCall
from tooldec.specs import ToolSet, from_function


@dataclass
class ToolResult:
    """One executed call: the arguments it got and its result, or the error it raised."""

    name: str
    arguments: dict[str, Any]
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the tool returned normally."""
        return self.error is None

    def observation(self) -> str:
        """The text a model reads back: the result, or `Error: ...`."""
        return format_value(self.result) if self.ok else f"Error: {self.error}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: name, arguments, result (or error)."""
        out: dict[str, Any] = {"name": self.name, "arguments": self.arguments, "result": _jsonable(self.result)}
        if self.error is not None:
            out["error"] = self.error
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def format_value(value: Any, digits: int = 6) -> str:
    """A result as a model should read it: integral floats as integers, others rounded to `digits` decimals."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        if abs(value) >= 1e15 or (value != 0 and abs(value) < 10**-digits):
            return f"{value:.{digits}g}"
        if value == int(value):
            return str(int(value))
        return f"{round(value, digits):.{digits}f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and abs(value) >= 10**15:
        return format(Decimal(value), f".{digits}g")  # ints past float range too
    return str(value)


class ToolExecutor:
    """Dispatches parsed calls to Python functions by tool name, after checking the arguments' schema."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]], tools: ToolSet | None = None) -> None:
        """`tools` describes the functions (built from their signatures when not given)."""
        self.functions = dict(functions)
        self.tools = tools if tools is not None else ToolSet(from_function(f) for f in self.functions.values())
        missing = [t.name for t in self.tools if t.name not in self.functions]
        if missing:
            raise ValueError(f"no function for tools {missing}")

    @classmethod
    def from_functions(cls, functions: list[Callable[..., Any]]) -> ToolExecutor:
        """An executor for plain Python functions, named after them."""
        return cls({f.__name__: f for f in functions})

    def run(self, call: ParsedCall) -> ToolResult:
        """Run one call; unknown tools, bad arguments and exceptions come back as an error result."""
        if call.name not in self.tools:
            return ToolResult(call.name, dict(call.arguments), error=f"unknown tool {call.name!r}")
        tool = self.tools[call.name]
        try:
            arguments = call.bind(tool)
        except CallParseError as exc:
            return ToolResult(call.name, dict(call.arguments), error=str(exc))
        try:
            jsonschema.validate(arguments, tool.parameters)
        except jsonschema.ValidationError as exc:
            return ToolResult(call.name, arguments, error=f"invalid arguments: {exc.message}")
        try:
            result = self.functions[call.name](**arguments)
        except Exception as exc:  # noqa: BLE001 -- a tool's failure is an observation, not a crash
            return ToolResult(call.name, arguments, error=f"{type(exc).__name__}: {exc}")
        return ToolResult(call.name, arguments, result)


def _not_implemented(name: str) -> Callable[..., Any]:
    def run(**_: Any) -> Any:
        raise NotImplementedError(f"tool {name!r} was described in a file and has no Python implementation")

    run.__name__ = name
    return run


def load_executor(source: str | None) -> ToolExecutor:
    """Tools to run: None for the FuncQA math tools; `file.py` or `package.module` (optionally `:f,g`) for
    the public functions of a module; a JSON tools file for described tools (calls are made, not run)."""
    import importlib
    import importlib.util
    import inspect
    from pathlib import Path

    from tooldec.specs import load_tools_file
    from tooldec.toolsets import FUNCQA_FUNCTIONS, funcqa_tools

    if source is None:
        return ToolExecutor(FUNCQA_FUNCTIONS, funcqa_tools())
    target, _, names = source.partition(":")
    path = Path(target)
    if path.suffix == ".json" or (path.is_file() and path.suffix != ".py"):
        tools = load_tools_file(path)
        return ToolExecutor({t.name: _not_implemented(t.name) for t in tools}, tools)
    if path.suffix == ".py":
        if not path.is_file():
            raise FileNotFoundError(f"no such tools module: {path}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    if names:
        functions = [getattr(module, n.strip()) for n in names.split(",") if n.strip()]
    else:
        functions = [
            f
            for n, f in vars(module).items()
            if inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")
        ]
    if not functions:
        raise ValueError(f"no public functions in {source}")
    return ToolExecutor.from_functions(functions)
