"""What JSON Schema's keywords mean to the schema compiler, and small facts about JSON values.

Annotation keywords constrain nothing; the unsupported ones are refused wherever they appear; a standard
`format` is either enforced or refused, any other is an annotation.
"""

from __future__ import annotations

from typing import Any

ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "example", "$schema", "$id", "id", "$comment",
        "readOnly", "writeOnly", "deprecated", "contentEncoding", "contentMediaType", "$anchor",
        "definitions", "$defs", "discriminator", "xml", "externalDocs", "$vocabulary", "markdownDescription",
    }
)
# Validation keywords we do not enforce in general (some are accepted where trivially satisfied).
UNSUPPORTED = frozenset(
    {
        "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
    }
)
KEYWORDS = frozenset(
    {
        "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
        "maxLength", "minLength", "pattern", "format", "items", "additionalItems", "prefixItems", "contains",
        "minContains", "maxContains", "maxItems", "minItems", "uniqueItems", "properties", "patternProperties",
        "additionalProperties", "propertyNames", "required", "dependencies", "dependentRequired",
        "dependentSchemas", "minProperties", "maxProperties", "allOf", "anyOf", "oneOf", "not", "if", "then",
        "else", "$ref", "nullable", *UNSUPPORTED,
    }
)
"""Every keyword that may constrain a value: a key that is neither one of these nor an annotation is ignored."""
TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_TYPE_AND_ENUM = frozenset({"type", "enum"})
# The formats JSON Schema defines (draft 4 to 2020-12). A `format` outside this list has no defined meaning,
# so validators treat it as an annotation and so do we; a standard one is either enforced or refused.
STANDARD_FORMATS = frozenset(
    {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
        "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
        "relative-json-pointer", "regex", "host-name", "ip-address", "color", "utc-millisec", "style", "phone",
    }
)
NUMBER_FORMATS = frozenset({"utc-millisec"})
"""Standard formats of numbers that constrain nothing: draft 3's utc-millisec is any number of milliseconds."""
INT_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1)}


def _ptr(path: str, *parts: object) -> str:
    out = path
    for p in parts:
        out += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return out


def value_key(v: Any) -> Any:
    """A hashable key equal for values JSON Schema deems equal (1 == 1.0 at any depth, but true != 1)."""
    if isinstance(v, bool) or v is None:
        return ("literal", v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, str):
        return ("string", v)
    if isinstance(v, list):
        return ("array", tuple(value_key(x) for x in v))
    if isinstance(v, dict):
        return ("object", frozenset((k, value_key(x)) for k, x in v.items()))
    return ("other", repr(v))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)



def _json_depth(v: Any) -> int:
    """How many containers deep a JSON value nests."""
    if isinstance(v, list):
        return 1 + max((_json_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_json_depth(x) for x in v.values()), default=0)
    return 0



def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"

