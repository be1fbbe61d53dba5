"""A local stand-in for the REST APIs of RestBench: answers calls with fake data shaped by the OpenAPI spec.

No network is used. Each operation's success response schema (local `$ref`s resolved) is filled with
deterministic values: the random generator is seeded by the operation and its arguments, so the same call
always gets the same answer. Depth, array lengths and the number of properties are bounded so that
responses stay small (past the depth limit, or inside a recursive `$ref`, arrays are empty and objects
hold only their required properties); `oneOf` / `anyOf` take their first branch; string patterns are not
followed. An argument whose name matches a response property is echoed into it (a movie fetched with
`movie_id=5` has `id` 5), which keeps multi-step plans coherent. Every response says it is simulated.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tooldec.specs import ToolSet, ToolSpec, openapi_operations

_SUCCESS = ("200", "201", "202", "203", "204", "2XX", "2xx", "default")
_REQUIRED_DEPTH = 4
"""Levels past `max_depth` where objects still get their required properties (then they are empty)."""
_JSON_MEDIA = ("application/json", "application/json; charset=utf-8", "*/*")
_FORMATS = {
    "date": lambda rng: f"20{rng.randint(0, 24):02d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    "date-time": lambda rng: (
        f"20{rng.randint(0, 24):02d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        f"T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    ),
    "uri": lambda rng: "https://example.com/" + _word(rng, 8),
    "url": lambda rng: "https://example.com/" + _word(rng, 8),
    "email": lambda rng: _word(rng, 6) + "@example.com",
    "uuid": lambda rng: "-".join(_word(rng, n, string.hexdigits.lower()[:16]) for n in (8, 4, 4, 4, 12)),
}


@dataclass(frozen=True)
class Operation:
    """One REST operation: its tool, HTTP method, path template and OpenAPI operation object."""

    tool: ToolSpec
    method: str
    path: str
    definition: dict[str, Any]

    @property
    def step(self) -> str:
        """`METHOD /path/{template}`, the form of RestBench's gold solution steps."""
        return f"{self.method} {self.path}"


class RestSimulator:
    """Simulated responses for the operations of one OpenAPI document."""

    def __init__(
        self,
        spec: dict[str, Any],
        *,
        max_depth: int = 4,
        max_items: int = 2,
        max_properties: int = 16,
        seed: int = 0,
    ) -> None:
        """Index the document's operations; `seed` varies every response of a run at once."""
        self.spec = spec
        self.max_depth = max_depth
        self.max_items = max_items
        self.max_properties = max_properties
        self.seed = seed
        self.operations: dict[str, Operation] = {}
        for tool, method, path in openapi_operations(spec):
            definition = spec["paths"][path][method.lower()]
            self.operations[tool.name] = Operation(tool, method, path, definition)

    @property
    def tools(self) -> ToolSet:
        """The operations as tools, in document order."""
        return ToolSet(op.tool for op in self.operations.values())

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The simulated response to calling operation `name`: status, method, filled path and data."""
        arguments = dict(arguments or {})
        op = self.operations.get(name)
        if op is None:
            return {"simulated": True, "status": 404, "error": f"no operation named {name!r}"}
        missing = [p for p in op.tool.parameters.get("required", []) if p not in arguments]
        response: dict[str, Any] = {
            "simulated": True,
            "method": op.method,
            "path": _fill_path(op.path, arguments),
        }
        if missing:
            return {**response, "status": 400, "error": f"missing required parameter(s) {', '.join(missing)}"}
        key = json.dumps([self.seed, name, arguments], sort_keys=True, default=str)
        rng = random.Random(hashlib.sha256(key.encode()).digest())
        status, schema = self._success(name)
        data = None if schema is None else self._value(schema, rng, arguments, 0, ())
        return {**response, "status": status, "data": data}

    def response_schema(self, name: str) -> dict[str, Any] | None:
        """The JSON schema of operation `name`'s success response (refs left in), or None if it has none."""
        return self._success(name)[1]

    def _success(self, name: str) -> tuple[int, dict[str, Any] | None]:
        """The first documented success status of operation `name` (200 if none) and its JSON schema."""
        responses = self._deref(self.operations[name].definition.get("responses", {}))
        for code in _SUCCESS:
            response = self._deref(responses.get(code)) if isinstance(responses, dict) else None
            if not isinstance(response, dict):
                continue
            status = int(code) if code.isdigit() else 200
            if isinstance(response.get("schema"), dict):
                return status, response["schema"]
            content = response.get("content", {})
            for media in (*_JSON_MEDIA, *content):
                schema = (
                    content.get(media, {}).get("schema") if isinstance(content.get(media), dict) else None
                )
                if isinstance(schema, dict):
                    return status, schema
            return status, None
        return 200, None

    def _deref(self, node: Any) -> Any:
        """Follow local `$ref`s until a node without one (None when a ref does not resolve)."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen or not ref.startswith("#"):
                return None
            seen.add(ref)
            node = self.spec
            for part in ref[1:].split("/")[1:]:
                part = part.replace("~1", "/").replace("~0", "~")
                node = node.get(part) if isinstance(node, dict) else None
        return node

    def _value(
        self, schema: Any, rng: random.Random, args: dict[str, Any], depth: int, refs: tuple[str, ...]
    ) -> Any:
        """A value for `schema`; past `max_depth` or inside a recursive `$ref`, arrays are empty, objects minimal."""
        if isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
            if schema["$ref"] in refs:
                depth = self.max_depth + 1
            refs = (*refs, schema["$ref"])
            schema = self._deref(schema)
        if not isinstance(schema, dict):
            return None
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return rng.choice(schema["enum"])
        for key in ("oneOf", "anyOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return self._value(schema[key][0], rng, args, depth, refs)
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                value = self._value(part, rng, args, depth, refs)
                if isinstance(value, dict):
                    merged.update(value)
            return merged
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        if kind == "array" and depth > self.max_depth:
            return []
        if kind == "object" and depth > self.max_depth + _REQUIRED_DEPTH:
            return {}
        if kind == "object":
            return self._object(schema, rng, args, depth, refs)
        if kind == "array":
            count = min(self.max_items, max(_int(schema.get("minItems"), 1), 1))
            return [self._value(schema.get("items", {}), rng, args, depth + 1, refs) for _ in range(count)]
        return _scalar(kind, schema, rng)

    def _object(
        self,
        schema: dict[str, Any],
        rng: random.Random,
        args: dict[str, Any],
        depth: int,
        refs: tuple[str, ...],
    ) -> dict[str, Any]:
        """Required properties, then others up to `max_properties`; arguments echoed into same-named ones."""
        props = schema.get("properties", {})
        required = [name for name in props if name in (schema.get("required") or [])]
        optional = [name for name in props if name not in required]
        room = self.max_properties - len(required) if depth <= self.max_depth else 0
        chosen = set(required + optional[: max(room, 0)])
        echoed = _echoed(args) if depth == 0 else {}
        out: dict[str, Any] = {}
        for name in (name for name in props if name in chosen):
            if name in echoed:
                out[name] = echoed[name]
            else:
                out[name] = self._value(props[name], rng, args, depth + 1, refs)
        return out


def _echoed(args: Mapping[str, Any]) -> dict[str, Any]:
    """Scalar arguments by name, plus `id` for the single `*_id` argument when there is exactly one."""
    scalars = {k: v for k, v in args.items() if not isinstance(v, dict | list)}
    ids = [v for k, v in scalars.items() if k.endswith("_id")]
    return {"id": ids[0], **scalars} if len(ids) == 1 else scalars


def _scalar(kind: str, schema: dict[str, Any], rng: random.Random) -> Any:
    """A scalar of JSON type `kind` within the schema's simple bounds."""
    if kind == "integer":
        low = _int(schema.get("minimum"), 1)
        return rng.randint(low, max(low, _int(schema.get("maximum"), low + 999)))
    if kind == "number":
        return round(rng.uniform(0, 10), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    make = _FORMATS.get(schema.get("format", ""))
    if make:
        return make(rng)
    low = _int(schema.get("minLength"), 0)
    return _word(rng, min(max(6, low), max(_int(schema.get("maxLength"), 6), low)))


def _word(rng: random.Random, n: int, alphabet: str = string.ascii_lowercase) -> str:
    """`n` random characters."""
    return "".join(rng.choice(alphabet) for _ in range(n))


def _int(value: Any, default: int) -> int:
    """An integer keyword (some documents write them as strings), else `default`."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _fill_path(template: str, arguments: Mapping[str, Any]) -> str:
    """The path with `{name}` placeholders replaced by the matching arguments."""
    path = template
    for name, value in arguments.items():
        path = path.replace("{" + name + "}", str(value))
    return path
