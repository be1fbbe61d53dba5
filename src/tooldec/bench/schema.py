"""The peers' grammar: one JSON Schema for "a call of any tool of the set", equal to tooldec's `json` format.

`{"name": <const>, "arguments": <the tool's parameters>}` per tool, `anyOf` over tools, and every object closed
(`additionalProperties: false` where the schema leaves it open), as tooldec treats objects in tool calls.
"""

from __future__ import annotations

from typing import Any

from tooldec.specs import ToolSet
from tooldec.specs.normalize import closed_objects


def _rebase(node: Any, prefix: str) -> None:
    """Point every local `$ref` of `node` (in place) at the same place below `prefix` in the call schema."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            node["$ref"] = prefix + ref[1:]
        for value in node.values():
            _rebase(value, prefix)
    elif isinstance(node, list):
        for value in node:
            _rebase(value, prefix)


def call_schema(tools: ToolSet) -> dict[str, Any]:
    """JSON Schema of one call `{"name": ..., "arguments": {...}}` of any tool in `tools`."""
    single = len(tools) == 1
    branches = []
    for i, tool in enumerate(tools):
        arguments = closed_objects(tool.parameters)
        _rebase(arguments, ("#" if single else f"#/anyOf/{i}") + "/properties/arguments")
        branches.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return branches[0] if single else {"anyOf": branches}
