"""Build a ToolSpec from a Python function's signature, type hints and docstring."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from tooldec.errors import ToolSpecError
from tooldec.specs.normalize import join_pointer, normalize_schema
from tooldec.specs.toolspec import ToolSpec

_SCALARS: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}
_SEQUENCES = (list, collections.abc.Sequence, collections.abc.MutableSequence)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_UNIONS = (Union, types.UnionType)

_ARGS_HEADER = re.compile(r"(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments):")
_SECTION_HEADER = re.compile(r"[A-Z][A-Za-z ]*:")
_GOOGLE_ARG = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")
_SPHINX_PARAM = re.compile(r":param\s+(?:[^:]*?\s+)?\*{0,2}(\w+)\s*:\s*(.*)")
_NO_DEFAULT = object()


def from_function(fn: Callable[..., Any]) -> ToolSpec:
    """Describe `fn` as a tool, so a model can be constrained to call it with well-typed keyword arguments."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise ToolSpecError("callable has no __name__ to use as the tool name")
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as err:
        raise ToolSpecError(f"cannot read the signature or type hints: {err}", tool=name) from err
    description, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
    converter = _Converter(name)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in signature.parameters.items():
        path = join_pointer("#/properties", pname)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolSpecError("*args and **kwargs cannot be tool parameters", tool=name, path=path)
        hint = hints.get(pname, Any)
        schema = converter.schema(hint, path)
        doc = _annotated_doc(hint) or param_docs.get(pname)
        if doc:
            schema["description"] = doc
        if param.default is param.empty:
            required.append(pname)
        else:
            _add_default(schema, param.default)
        properties[pname] = schema
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if converter.defs:
        parameters["$defs"] = converter.defs
    return ToolSpec(name, description, normalize_schema(parameters, tool=name))


class _Converter:
    """Turns annotations into JSON Schema for one tool, gathering pydantic `$defs` at the top level."""

    def __init__(self, tool: str) -> None:
        """Start with no shared definitions and no dataclass being expanded."""
        self.tool = tool
        self.defs: dict[str, Any] = {}
        self._expanding: set[type] = set()

    def schema(self, tp: Any, path: str) -> dict[str, Any]:
        """Return the JSON Schema for annotation `tp`, found at `path` in the parameters schema."""
        if tp is Any:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        if isinstance(tp, type) and tp in _SCALARS:
            return {"type": _SCALARS[tp]}
        origin, args = get_origin(tp), get_args(tp)
        if origin is Annotated:
            schema = self.schema(args[0], path)
            doc = _annotated_doc(tp)
            if doc:
                schema["description"] = doc
            return schema
        if origin is Literal:
            return {"enum": [self._json_value(v, path) for v in args]}
        if origin in _UNIONS:
            return {"anyOf": [self.schema(a, join_pointer(path, "anyOf", i)) for i, a in enumerate(args)]}
        container = tp if origin is None else origin
        if container in _SEQUENCES:
            return self._array(args, path)
        if container in _SETS:
            return {**self._array(args, path), "uniqueItems": True}
        if container is tuple:
            return self._tuple(args, path)
        if container in _MAPPINGS:
            return self._mapping(args, path)
        if isinstance(tp, type):
            if issubclass(tp, enum.Enum):
                return {"enum": [self._json_value(member.value, path) for member in tp]}
            if _is_pydantic_model(tp):
                return self._pydantic(tp, path)
            if dataclasses.is_dataclass(tp):
                return self._dataclass(tp, path)
        raise ToolSpecError(f"unsupported annotation {tp!r}", tool=self.tool, path=path)

    def _array(self, args: tuple[Any, ...], path: str) -> dict[str, Any]:
        """An array, with an items schema when the element type is given."""
        if not args:
            return {"type": "array"}
        return {"type": "array", "items": self.schema(args[0], join_pointer(path, "items"))}

    def _tuple(self, args: tuple[Any, ...], path: str) -> dict[str, Any]:
        """`tuple[X, ...]` or a fixed-length tuple of one element type; mixed element types are refused."""
        if not args:
            return {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            return self._array(args[:1], path)
        if any(a != args[0] for a in args):
            raise ToolSpecError(
                "fixed-length tuples of different element types are not supported", tool=self.tool, path=path
            )
        return {**self._array(args[:1], path), "minItems": len(args), "maxItems": len(args)}

    def _mapping(self, args: tuple[Any, ...], path: str) -> dict[str, Any]:
        """An object with string keys; the value type becomes additionalProperties."""
        if not args:
            return {"type": "object"}
        key, value = args
        if key is not str:
            raise ToolSpecError("mapping keys must be str to fit a JSON object", tool=self.tool, path=path)
        return {
            "type": "object",
            "additionalProperties": self.schema(value, join_pointer(path, "additionalProperties")),
        }

    def _pydantic(self, model: type, path: str) -> dict[str, Any]:
        """The model's own JSON Schema, its `$defs` moved to the top so `#/$defs/...` references resolve."""
        schema: dict[str, Any] = model.model_json_schema()  # type: ignore[attr-defined]
        for def_name, definition in schema.pop("$defs", {}).items():
            if self.defs.setdefault(def_name, definition) != definition:
                raise ToolSpecError(
                    f"two different types share the $defs name {def_name!r}", tool=self.tool, path=path
                )
        return schema

    def _dataclass(self, cls: type, path: str) -> dict[str, Any]:
        """An object with one property per init field; fields with defaults are optional."""
        if cls in self._expanding:
            raise ToolSpecError(
                f"recursive dataclass {cls.__name__} is not supported", tool=self.tool, path=path
            )
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except (TypeError, NameError) as err:
            raise ToolSpecError(
                f"cannot read the fields of {cls.__name__}: {err}", tool=self.tool, path=path
            ) from err
        self._expanding.add(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            schema = self.schema(hints.get(field.name, Any), join_pointer(path, "properties", field.name))
            if field.default is not dataclasses.MISSING:
                _add_default(schema, field.default)
            elif field.default_factory is dataclasses.MISSING:
                required.append(field.name)
            properties[field.name] = schema
        self._expanding.discard(cls)
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

    def _json_value(self, value: Any, path: str) -> Any:
        """A Literal or Enum value as JSON, refusing values JSON cannot hold."""
        converted = _to_json(value)
        if converted is _NO_DEFAULT:
            raise ToolSpecError(f"value {value!r} cannot be written as JSON", tool=self.tool, path=path)
        return converted


def _is_pydantic_model(cls: type) -> bool:
    """Tell whether `cls` derives from pydantic's BaseModel, without importing pydantic."""
    return any(
        base.__name__ == "BaseModel" and base.__module__.startswith("pydantic") for base in cls.__mro__
    )


def _annotated_doc(tp: Any) -> str | None:
    """The first string in an `Annotated[...]`'s metadata, used as the description."""
    if get_origin(tp) is not Annotated:
        return None
    return next((m for m in tp.__metadata__ if isinstance(m, str)), None)


def _to_json(value: Any) -> Any:
    """`value` as plain JSON data (enum members by value), or _NO_DEFAULT when it has no JSON form."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return _NO_DEFAULT


def _add_default(schema: dict[str, Any], default: Any) -> None:
    """Record a default value in the schema when it can be written as JSON."""
    converted = _to_json(default)
    if converted is not _NO_DEFAULT:
        schema["default"] = converted


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its first paragraph and per-parameter descriptions (Google and Sphinx style)."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(":") or _SECTION_HEADER.fullmatch(stripped):
            break
        summary.append(stripped)
    return " ".join(summary), {**_google_args(lines), **_sphinx_params(lines)}


def _google_args(lines: list[str]) -> dict[str, str]:
    """Parameter descriptions from Google-style `Args:` sections, continuation lines joined."""
    docs: dict[str, str] = {}
    header_indent: int | None = None
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if header_indent is None or indent <= header_indent:
            header_indent = indent if _ARGS_HEADER.fullmatch(stripped) else None
            entry_indent, current = None, None
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _GOOGLE_ARG.fullmatch(stripped) if indent == entry_indent else None
        if match:
            current = match.group(1)
            docs[current] = match.group(2).strip()
        elif current is not None:
            docs[current] = f"{docs[current]} {stripped}".strip()
    return docs


def _sphinx_params(lines: list[str]) -> dict[str, str]:
    """Parameter descriptions from Sphinx-style `:param [type] name:` fields, continuation lines joined."""
    docs: dict[str, str] = {}
    current: str | None = None
    field_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        match = _SPHINX_PARAM.fullmatch(stripped)
        if match:
            current, field_indent = match.group(1), indent
            docs[current] = match.group(2).strip()
        elif current is not None and stripped and indent > field_indent:
            docs[current] = f"{docs[current]} {stripped}".strip()
        else:
            current = None
    return docs
