"""KAMEL's Wikidata relations as tools, in ToolkenGPT's order (func_dict.json), named as in api_desc.json.

Each relation is documented as `name(arg): description`. The tool is called `name` with one required
string parameter per comma-separated argument (`title/name` becomes `title_or_name`). Five names occur
twice or three times among the 234 relations (`location`, `start_year`, ...); a later relation with a taken
name gets `_2`, `_3`. Descriptions are kept apart from the specs, which carry an empty description,
because the ToolDec paper's KAMEL prompt lists tool names only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tooldec.errors import ToolSpecError
from tooldec.specs import ToolSet, ToolSpec

_DOC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(([^)]*)\)\s*:\s*(.*?)\s*$", re.DOTALL)


@dataclass(frozen=True)
class KamelTools:
    """The first K KAMEL relations as tools, with the maps between relation ids and tool names."""

    tools: ToolSet
    tool_of: dict[str, str]
    relation_of: dict[str, str]
    descriptions: dict[str, str]


def parse_relation_doc(doc: str) -> tuple[str, list[str], str]:
    """Split `name(arg, ...): description` into the name, the parameter names and the description."""
    match = _DOC.match(doc)
    if not match:
        raise ToolSpecError(f"KAMEL relation documentation is not 'name(arg): description': {doc!r}")
    name, args, description = match.groups()
    params = [_param_name(arg) for arg in args.split(",") if arg.strip()]
    if not params or len(set(params)) != len(params):
        raise ToolSpecError(f"KAMEL relation needs distinct arguments: {doc!r}", tool=name)
    return name, params, description


def kamel_tools(relations: Sequence[tuple[str, str]], k: int | None = None) -> KamelTools:
    """Tools for the first `k` (default all) of `relations`, given as (relation id, documentation) in order."""
    chosen = list(relations if k is None else relations[:k])
    if k is not None and not 0 < k <= len(relations):
        raise ValueError(f"k must be between 1 and {len(relations)}, got {k}")
    specs: list[ToolSpec] = []
    tool_of: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    counts: dict[str, int] = {}
    for relation, doc in chosen:
        if relation in tool_of:
            raise ToolSpecError(f"KAMEL relation {relation!r} is listed twice")
        base, params, description = parse_relation_doc(doc)
        counts[base] = counts.get(base, 0) + 1
        name = base if counts[base] == 1 else f"{base}_{counts[base]}"
        parameters = {
            "type": "object",
            "properties": {p: {"type": "string"} for p in params},
            "required": params,
        }
        specs.append(ToolSpec(name, "", parameters))
        tool_of[relation] = name
        descriptions[name] = description
    return KamelTools(ToolSet(specs), tool_of, {name: rel for rel, name in tool_of.items()}, descriptions)


def _param_name(arg: str) -> str:
    """A Python identifier for one documented argument: `title/name` -> `title_or_name`."""
    words = [re.sub(r"\W+", "_", part.strip()).strip("_") for part in arg.split("/")]
    name = "_or_".join(w for w in words if w)
    if not name or not name.isidentifier():
        raise ToolSpecError(f"KAMEL argument {arg!r} cannot be a parameter name")
    return name
