"""Tool specifications: a callable name, a description and a JSON Schema for the arguments."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tooldec.errors import ToolSpecError
from tooldec.specs.normalize import join_pointer

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
MAX_NAME_LENGTH = 128


@dataclass(frozen=True)
class ToolSpec:
    """One tool a model may call; `parameters` is a normalised object schema for its keyword arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    text: str = field(init=False, repr=False, compare=False)
    """`[name, description, parameters]` as JSON, written once: the tool's identity in the compiler's cache keys
    (a spec is not changed after construction, where its parameters are checked)."""

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
        object.__setattr__(self, "text", json.dumps([name, self.description, self.parameters], default=str))

    def to_openai(self) -> dict[str, Any]:
        """Return the OpenAI `tools` entry for this tool (a copy, so the spec stays unchanged)."""
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
