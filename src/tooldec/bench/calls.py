"""The texts every engine is forced through: a valid call of a workload's tool and a call of an unknown tool.

Arguments come from a small deterministic sampler (every property, optional ones included, values inside their
bounds); the text is tooldec's canonical JSON call (`", "` and `": "` separators), which each peer is configured
to accept too. A schema the sampler cannot satisfy falls back to a seeded random walk of tooldec's guide.
"""

from __future__ import annotations

import random
from typing import Any

from jsonschema.validators import validator_for

from tooldec.compiler import Compiler
from tooldec.grammar.calls import get_format
from tooldec.sample import random_walk
from tooldec.specs import ToolSet, ToolSpec
from tooldec.vocab import Vocabulary

CALLS_PER_CASE = 3
_SAMPLE_STRINGS = {"date": "2024-05-17", "date-time": "2024-05-17T08:30:00Z", "time": "08:30:00",
                   "email": "ada@example.com", "uri": "https://example.com/a", "ipv4": "10.0.0.1",
                   "uuid": "123e4567-e89b-12d3-a456-426614174000", "hostname": "example.com"}


def sample_value(schema: Any, depth: int = 0) -> Any:
    """A plain value valid under common schemas: first enum/const/branch, bounded numbers, 2-item arrays."""
    if not isinstance(schema, dict) or depth > 8:
        return "x"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return sample_value(schema[key][0], depth + 1)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        return {k: sample_value(v, depth + 1) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        count = max(int(schema.get("minItems", 2)), min(2, int(schema.get("maxItems", 2))))
        return [sample_value(schema.get("items", {}), depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", -1e18), schema.get("maximum", 1e18)
        value = min(max(42, low), high)
        return int(value) if kind == "integer" else float(value) + (0.5 if value + 0.5 <= high else 0.0)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = _SAMPLE_STRINGS.get(schema.get("format", ""), "example text")
    low, high = int(schema.get("minLength", 0)), int(schema.get("maxLength", 10_000))
    return (text * (1 + low // len(text)))[: max(low, min(high, len(text)))]


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` satisfies `schema` (JSON Schema semantics)."""
    return bool(validator_for(schema)(schema).is_valid(value))


def call_text(tool: ToolSpec, vocab: Vocabulary, seed: int = 0) -> str:
    """The canonical JSON call of `tool` with sampled arguments (random-walk fallback, seeded)."""
    fmt = get_format("json")
    arguments = sample_value(tool.parameters)
    if _valid(arguments, tool.parameters):
        return fmt.render(tool, arguments)
    grammar = Compiler(vocab).compile([tool], "json", use_cache=False)
    return random_walk(grammar.guide(), random.Random(seed), max_tokens=512).text()


def forced_calls(tools: ToolSet, vocab: Vocabulary, count: int = CALLS_PER_CASE) -> list[str]:
    """Call texts of `count` tools spread over the set (first, middle, last...), one per repeat in turn."""
    specs = list(tools)
    picks = sorted({round(i * (len(specs) - 1) / max(1, count - 1)) for i in range(count)})
    return [call_text(specs[i], vocab, seed=i) for i in picks]


def unknown_call_text(tools: ToolSet) -> str:
    """A well-formed call naming a tool that is not in the set (every engine must reject it)."""
    name = "zz_no_such_tool"
    while any(n.startswith(name[:3]) for n in tools.names):
        name = "q" + name
    return '{"name": "' + name + '", "arguments": {}}'
