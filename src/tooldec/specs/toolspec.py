"""Tool specifications: a callable name, a description and a JSON Schema for the arguments, or, for a custom tool
(OpenAI's `{"type": "custom"}`), the format of its one free-text input."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from tooldec.errors import ToolSpecError
from tooldec.specs.normalize import join_pointer

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
MAX_NAME_LENGTH = 128
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
"""The parameters of a custom tool (its call carries one text input instead of arguments)."""
INPUT_SYNTAXES = ("text", "lark", "regex")


@dataclass(frozen=True)
class InputFormat:
    """The input of a custom tool: free text, a sentence of a Lark grammar, or a full match of a regex (Python
    `re` syntax), as OpenAI's custom tool `format` says."""

    syntax: Literal["text", "lark", "regex"] = "text"
    definition: str = ""

    def __post_init__(self) -> None:
        """Reject an unknown syntax and a grammar or regex that is not a string."""
        if self.syntax not in INPUT_SYNTAXES:
            raise ToolSpecError(f"custom tool format syntax must be lark or regex, not {self.syntax!r}",
                                path="#/format/grammar/syntax")
        if not isinstance(self.definition, str):
            raise ToolSpecError("custom tool format definition must be a string", path="#/format/grammar/definition")

    def to_openai(self) -> dict[str, Any]:
        """OpenAI's `format` object of a custom tool."""
        if self.syntax == "text":
            return {"type": "text"}
        return {"type": "grammar", "grammar": {"syntax": self.syntax, "definition": self.definition}}


@dataclass(frozen=True)
class ToolSpec:
    """One tool a model may call; `parameters` is a normalised object schema for its keyword arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    text: str = field(init=False, repr=False, compare=False)
    """`[name, description, parameters]` as JSON (and the input format of a custom tool), written once: the tool's
    identity in the compiler's cache keys (a spec is not changed after construction, where its parameters are
    checked)."""
    input_format: InputFormat | None = None
    """Set for a custom tool: its call carries one text input in this format instead of JSON arguments."""

    def __post_init__(self) -> None:
        """Reject names a model cannot emit as a call and argument schemas that are not objects."""
        name = self.name
        tool = name if isinstance(name, str) else None
        if not isinstance(name, str) or not name:
            raise ToolSpecError("tool name must be a non-empty string", tool=tool, path="#/name")
        if len(name) > MAX_NAME_LENGTH:
            raise ToolSpecError(
                f"tool name is longer than {MAX_NAME_LENGTH} characters", tool=name, path="#/name"
            )
        if not NAME_PATTERN.fullmatch(name):
            raise ToolSpecError("tool name must match [A-Za-z_][A-Za-z0-9_.-]*", tool=name, path="#/name")
        if not isinstance(self.description, str):
            raise ToolSpecError("description must be a string", tool=name, path="#/description")
        _check_parameters(self.parameters, name)
        identity: list[Any] = [name, self.description, self.parameters]
        if self.input_format is not None:
            identity += [self.input_format.syntax, self.input_format.definition]
        object.__setattr__(self, "text", json.dumps(identity, default=str))

    @property
    def custom(self) -> bool:
        """Whether this is a custom tool (one text input, no JSON arguments)."""
        return self.input_format is not None

    def to_openai(self) -> dict[str, Any]:
        """Return the OpenAI `tools` entry for this tool (a copy, so the spec stays unchanged)."""
        if self.input_format is not None:
            return {"type": "custom", "custom": {"name": self.name, "description": self.description,
                                                 "format": self.input_format.to_openai()}}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }


def _check_parameters(parameters: Any, tool: str) -> None:
    """Check that `parameters` is an object schema whose required names are all declared properties."""
    path = "#/parameters"
    if not isinstance(parameters, dict):
        raise ToolSpecError("parameters must be a JSON Schema object", tool=tool, path=path)
    if parameters.get("type") != "object":
        raise ToolSpecError(
            'parameters must have "type": "object"', tool=tool, path=join_pointer(path, "type")
        )
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolSpecError("properties must be an object", tool=tool, path=join_pointer(path, "properties"))
    required = parameters.get("required", [])
    if not isinstance(required, list):
        raise ToolSpecError("required must be a list", tool=tool, path=join_pointer(path, "required"))
    for i, name in enumerate(required):
        if name not in properties:
            raise ToolSpecError(
                f"required parameter {name!r} is not among the properties",
                tool=tool,
                path=join_pointer(path, "required", i),
            )


class ToolSet:
    """An ordered, immutable collection of tools with unique names."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[ToolSpec] = ()) -> None:
        """Collect `tools` in order; a repeated name is an error, since calls are dispatched by name."""
        by_name: dict[str, ToolSpec] = {}
        for spec in tools:
            if not isinstance(spec, ToolSpec):
                raise TypeError(f"ToolSet holds ToolSpec objects, not {type(spec).__name__}")
            if spec.name in by_name:
                raise ToolSpecError("duplicate tool name", tool=spec.name)
            by_name[spec.name] = spec
        self._tools = MappingProxyType(by_name)

    def __iter__(self) -> Iterator[ToolSpec]:
        """Iterate over the tools in their given order."""
        return iter(self._tools.values())

    def __len__(self) -> int:
        """Return the number of tools."""
        return len(self._tools)

    def __getitem__(self, name: str) -> ToolSpec:
        """Return the tool called `name` (KeyError if there is none)."""
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        """Tell whether a tool called `name` is in the set."""
        return name in self._tools

    def __repr__(self) -> str:
        """Show the tool names, which identify the set."""
        return f"ToolSet({list(self._tools)!r})"

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names in order."""
        return tuple(self._tools)

    def with_tool(self, spec: ToolSpec) -> ToolSet:
        """Return a new set with `spec` appended; this set is left unchanged."""
        return ToolSet([*self, spec])
