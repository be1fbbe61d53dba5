"""Local `$ref` resolution: the one JSON-pointer walk shared by the schema compiler and the canonical writer."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote


def resolve_pointer(root: Any, ref: str) -> Any:
    """The node a local `#/...` reference points to; raises LookupError when it points nowhere.

    Only call it with `ref` starting with `#/` or equal to `#` (other references are the caller's to refuse).
    """
    node = root
    for raw in ref[1:].split("/")[1:]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise LookupError(f"$ref {ref!r} does not resolve")
    return node
