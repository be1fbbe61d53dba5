"""Turn the operations of an OpenAPI 3 (or Swagger 2) document into tools, one per path and method."""

from __future__ import annotations

import copy
import re
from typing import Any

from tooldec.errors import ToolSpecError
from tooldec.specs.normalize import (
    SCHEMA_KEYS,
    SCHEMA_LIST_KEYS,
    SCHEMA_MAP_KEYS,
    join_pointer,
    normalize_schema,
)
from tooldec.specs.toolspec import MAX_NAME_LENGTH, NAME_PATTERN, ToolSpec

_METHODS = ("get", "post", "put", "patch", "delete")
_ARGUMENT_LOCATIONS = ("path", "query")
# Keywords a Swagger 2 parameter carries directly instead of in a `schema`.
_SWAGGER_SCHEMA_KEYWORDS = (
    "type",
    "format",
    "items",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
)
# Keywords that some documents (Spotify's among them) spell as strings: "true"/"false", "50".
_BOOLEAN_KEYWORDS = frozenset({"additionalProperties", "uniqueItems", "nullable"})
_NUMBER_KEYWORDS = frozenset(
    {
        "minimum",
        "maximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
    }
)


def from_openapi(doc: dict[str, Any], *, include_body: bool = True) -> list[ToolSpec]:
    """One tool per operation of an OpenAPI document; see `openapi_operations` for the HTTP method and path."""
    return [spec for spec, _method, _path in openapi_operations(doc, include_body=include_body)]


def openapi_operations(doc: dict[str, Any], *, include_body: bool = True) -> list[tuple[ToolSpec, str, str]]:
    """Each operation as (tool, upper-case HTTP method, path template), so calls can be sent as requests."""
    paths = doc.get("paths") if isinstance(doc, dict) else None
    if not isinstance(paths, dict):
        raise ToolSpecError('an OpenAPI document needs a "paths" object', path="#/paths")
    used: set[str] = set()
    operations: list[tuple[ToolSpec, str, str]] = []
    for route, item in paths.items():
        item_path = join_pointer("#/paths", route)
        if not isinstance(item, dict):
            raise ToolSpecError("a path item must be an object", path=item_path)
        for method in _METHODS:
            if method in item:
                op_path = join_pointer(item_path, method)
                name = _unique_name(_operation_name(item[method], method, route), used)
                spec = _Operation(doc, name, op_path).tool(item, item[method], include_body)
                operations.append((spec, method.upper(), route))
    return operations


def _operation_name(operation: Any, method: str, route: str) -> str:
    """The operationId when it is a valid tool name, else `method_path` reduced to [A-Za-z0-9_]."""
    op_id = operation.get("operationId") if isinstance(operation, dict) else None
    if isinstance(op_id, str) and len(op_id) <= MAX_NAME_LENGTH and NAME_PATTERN.fullmatch(op_id):
        return op_id
    return "_".join(filter(None, [method, re.sub(r"[^A-Za-z0-9_]+", "_", route).strip("_")]))


def _unique_name(name: str, used: set[str]) -> str:
    """`name`, or `name_2`, `name_3`... when already taken by an earlier operation."""
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    used.add(candidate)
    return candidate


class _Operation:
    """Builds the tool of one operation, resolving local `$ref`s of the document as it goes."""

    def __init__(self, doc: dict[str, Any], name: str, path: str) -> None:
        """Prepare for operation `name` found at JSON pointer `path` of `doc`."""
        self.doc = doc
        self.name = name
        self.path = path
        self.defs: dict[str, Any] = {}
        self._def_keys: dict[str, str] = {}

    def tool(self, item: dict[str, Any], operation: Any, include_body: bool) -> ToolSpec:
        """The tool for `operation`: path and query parameters, plus the JSON body as `body`."""
        if not isinstance(operation, dict):
            raise ToolSpecError("an operation must be an object", tool=self.name, path=self.path)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param, where in self._parameters(item, operation):
            location = param.get("in")
            if location == "body":
                if include_body:
                    self._add_body(
                        properties, required, param, param.get("schema", {}), join_pointer(where, "schema")
                    )
                continue
            if location not in _ARGUMENT_LOCATIONS:
                continue
            pname = param.get("name")
            if not isinstance(pname, str):
                raise ToolSpecError(
                    "a parameter needs a string name", tool=self.name, path=join_pointer(where, "name")
                )
            if pname in properties:
                raise ToolSpecError(f"parameter name {pname!r} is used twice", tool=self.name, path=where)
            properties[pname] = self._argument_schema(param, where)
            if location == "path" or _truthy(param.get("required")):
                required.append(pname)
        body = operation.get("requestBody")
        if include_body and body is not None:
            body, where = self._deref(body, join_pointer(self.path, "requestBody"))
            media = _json_media(body.get("content", {})) if isinstance(body, dict) else None
            if media is not None:
                content = join_pointer(where, "content", media, "schema")
                self._add_body(properties, required, body, body["content"][media].get("schema", {}), content)
        parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
        if self.defs:
            parameters["$defs"] = {
                key: normalize_schema(self.defs[key], tool=self.name, path=ref)
                for ref, key in self._def_keys.items()
            }
        summary = operation.get("summary") or operation.get("description") or ""
        return ToolSpec(self.name, str(summary).strip(), parameters)

    def _argument_schema(self, param: dict[str, Any], where: str) -> dict[str, Any]:
        """A path or query parameter's schema (OpenAPI 3 `schema`, or Swagger 2 inline keywords)."""
        if "schema" in param:
            where = join_pointer(where, "schema")
            schema = self._schema(param["schema"], where, ())
        else:
            schema = self._schema({k: param[k] for k in _SWAGGER_SCHEMA_KEYWORDS if k in param}, where, ())
        if isinstance(param.get("description"), str) and isinstance(schema, dict):
            schema["description"] = param["description"]
        return normalize_schema(schema, tool=self.name, path=where)

    def _add_body(
        self, properties: dict[str, Any], required: list[str], body: dict[str, Any], schema: Any, where: str
    ) -> None:
        """Add the request body (a requestBody or Swagger `in: body` parameter) as the `body` argument."""
        if "body" in properties:
            raise ToolSpecError(
                "a parameter is named 'body', clashing with the request body", tool=self.name, path=where
            )
        converted = self._schema(schema, where, ())
        if isinstance(body.get("description"), str) and isinstance(converted, dict):
            converted.setdefault("description", body["description"])
        properties["body"] = normalize_schema(converted, tool=self.name, path=where)
        if _truthy(body.get("required")):
            required.append("body")

    def _parameters(
        self, item: dict[str, Any], operation: dict[str, Any]
    ) -> list[tuple[dict[str, Any], str]]:
        """Path-item then operation parameters, resolved, the operation's winning on the same (name, in)."""
        merged: dict[tuple[Any, Any], tuple[dict[str, Any], str]] = {}
        item_path = self.path.rsplit("/", 1)[0]
        for owner, owner_path in ((item, item_path), (operation, self.path)):
            listed = owner.get("parameters", [])
            if not isinstance(listed, list):
                raise ToolSpecError(
                    "parameters must be a list", tool=self.name, path=join_pointer(owner_path, "parameters")
                )
            for i, raw in enumerate(listed):
                param, where = self._deref(raw, join_pointer(owner_path, "parameters", i))
                if not isinstance(param, dict):
                    raise ToolSpecError("a parameter must be an object", tool=self.name, path=where)
                merged[(param.get("name"), param.get("in"))] = (param, where)
        return list(merged.values())

    def _deref(self, node: Any, where: str) -> tuple[Any, str]:
        """Follow `$ref`s from `node`, returning the target and its JSON pointer."""
        seen: set[str] = set()
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise ToolSpecError(f"$ref cycle through {ref!r}", tool=self.name, path=where)
            seen.add(ref)
            node, where = self._lookup(ref, where), ref
        return node, where

    def _lookup(self, ref: Any, where: str) -> Any:
        """The node a local `$ref` (`#/...`) points to in the document."""
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise ToolSpecError(f"only local $ref is supported, not {ref!r}", tool=self.name, path=where)
        node: Any = self.doc
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise ToolSpecError(f"unresolvable $ref {ref!r}", tool=self.name, path=where)
        return node

    def _schema(self, node: Any, where: str, active: tuple[str, ...]) -> Any:
        """An OpenAPI schema as plain JSON Schema: `$ref`s inlined (recursive ones kept in `$defs`),
        `nullable` and boolean exclusive bounds rewritten, "true"/"false" strings made booleans."""
        if not isinstance(node, dict):
            return copy.deepcopy(node)
        if "$ref" in node:
            return self._ref(node["$ref"], where, active)
        out: dict[str, Any] = {}
        for key, value in node.items():
            here = join_pointer(where, key)
            if key in SCHEMA_MAP_KEYS and isinstance(value, dict):
                out[key] = {k: self._schema(v, join_pointer(here, k), active) for k, v in value.items()}
            elif (key in SCHEMA_LIST_KEYS or key == "items") and isinstance(value, list):
                out[key] = [self._schema(v, join_pointer(here, i), active) for i, v in enumerate(value)]
            elif key in _BOOLEAN_KEYWORDS and value in ("true", "false"):
                out[key] = value == "true"
            elif key in _NUMBER_KEYWORDS and isinstance(value, str):
                out[key] = _number(value)
            elif key in SCHEMA_KEYS:
                out[key] = self._schema(value, here, active)
            else:
                out[key] = copy.deepcopy(value)
        return _rewrite_openapi_keywords(out)

    def _ref(self, ref: Any, where: str, active: tuple[str, ...]) -> dict[str, Any]:
        """Inline the schema `ref` names; a reference back into itself becomes `#/$defs/<key>`."""
        if ref in self._def_keys or ref in active:
            return {"$ref": "#/$defs/" + self._def_key(ref)}
        expanded = self._schema(self._lookup(ref, where), ref, (*active, ref))
        if ref in self._def_keys:
            self.defs[self._def_keys[ref]] = expanded
            return {"$ref": "#/$defs/" + self._def_keys[ref]}
        return expanded

    def _def_key(self, ref: str) -> str:
        """A `$defs` key for a recursive reference: its last pointer segment, made unique."""
        if ref not in self._def_keys:
            base = re.sub(r"[^A-Za-z0-9_.\-]+", "_", ref.rsplit("/", 1)[-1]) or "schema"
            key, n = base, 1
            while key in self._def_keys.values():
                n += 1
                key = f"{base}_{n}"
            self._def_keys[ref] = key
        return self._def_keys[ref]


def _rewrite_openapi_keywords(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace OpenAPI 3.0 `nullable` and Swagger/3.0 boolean `exclusiveMinimum/Maximum` by JSON Schema."""
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = schema.get(exclusive)
        if isinstance(flag, bool):
            del schema[exclusive]
            if flag and bound in schema:
                schema[exclusive] = schema.pop(bound)
    if schema.pop("nullable", False) is not True:
        return schema
    kind = schema.get("type")
    if kind is None:
        return {"anyOf": [schema, {"type": "null"}]}
    schema["type"] = _unique([*(kind if isinstance(kind, list) else [kind]), "null"])
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    return schema


def _json_media(content: Any) -> str | None:
    """The first JSON media type of a request body's `content` (application/json or */*+json)."""
    if not isinstance(content, dict):
        return None
    for media in content:
        kind = media.split(";", 1)[0].strip().lower()
        if kind == "application/json" or kind.endswith("+json"):
            return media
    return None


def _number(text: str) -> int | float | str:
    """A numeric string as a number; anything else unchanged, for schema validation to report."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def _unique(items: list[Any]) -> list[Any]:
    """Drop repeats, keeping first occurrences in order."""
    return list(dict.fromkeys(items))


def _truthy(flag: Any) -> bool:
    """A `required` flag, accepting the string "true" that some documents use."""
    return flag is True or (isinstance(flag, str) and flag.lower() == "true")
