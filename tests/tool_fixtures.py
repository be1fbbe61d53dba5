"""The tool set the decoding tests share: FuncQA's math tools and a weather tool with bounded values."""

from __future__ import annotations

from tooldec.specs import ToolSet, ToolSpec
from tooldec.toolsets import funcqa_tools

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "detailed": {"type": "boolean"},
        },
        "required": ["city"],
    },
)
TOOLS = ToolSet([*funcqa_tools(), WEATHER])
