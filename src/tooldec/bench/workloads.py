"""The benchmark workloads by name: tool sets every engine compiles (`rich`, `funcqa`, `tools200`, `kamel234`,
`bfcl-multiple`), and Lark grammars (`cfg-*`, `tooldec.bench.cfg`); a workload is one or more cases, each one tool
set or one grammar."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tooldec.bench.cfg import CFG_NOTES, CFG_WORKLOADS, GrammarCase, grammar_case
from tooldec.errors import ToolDecError
from tooldec.specs import ToolSet, ToolSpec, from_openai_tools
from tooldec.toolsets import funcqa_tools

if TYPE_CHECKING:
    from tooldec.bench.engines.base import BatchDriver, Engine

TOOLS200_SEED = 200
DEFAULT_BFCL_ENTRIES = 20


@dataclass(frozen=True)
class Case:
    """One tool set of a workload (a workload with several cases reports figures pooled over them)."""

    name: str
    tools: ToolSet

    def compile(self, engine: Engine) -> Any:
        """The engine's compile of one call of any tool of the set, every cache off."""
        return engine.compile(self.tools)

    def driver(self, engine: Engine, threads: int) -> BatchDriver:
        """The engine's batch path for tool-call rows."""
        return engine.batch(threads)


@dataclass(frozen=True)
class Workload:
    """A named list of cases (all tool sets or all grammars), plus a note on how it was built (sampling, skipped
    entries)."""

    name: str
    cases: tuple[Case, ...] | tuple[GrammarCase, ...]
    note: str = ""


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An object schema with exactly these properties."""
    return {"type": "object", "properties": properties, "required": required}


def rich_tools() -> ToolSet:
    """One tool exercising every common parameter kind: bounds, enum, optional and nested parameters."""
    passenger = _object(
        {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        ["name", "age"],
    )
    params = _object(
        {
            "origin": {"type": "string", "description": "IATA code of the departure airport"},
            "destination": {"type": "string"},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
            "max_price": {"type": "number"},
            "refundable": {"type": "boolean"},
            "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business", "first"]},
            "lead_passenger": passenger,
            "notes": {"type": "string"},
        },
        ["origin", "destination", "passengers", "max_price", "refundable", "cabin", "lead_passenger"],
    )
    return ToolSet([ToolSpec("book_flight", "Book a flight for some passengers.", params)])


_VERBS = ("get", "set", "list", "create", "delete", "update", "search", "find", "send", "compute")
_NOUNS = ("user", "order", "invoice", "weather", "flight", "hotel", "stock", "file", "email", "event",
          "ticket", "payment", "product", "review", "route", "device", "report", "message", "task", "team")
_PARAM_NAMES = ("id", "name", "query", "limit", "city", "date", "amount", "count", "enabled", "verbose",
                "unit", "page", "score", "title", "owner", "status", "price", "level", "tag", "email")


def _synthetic_param(rng: random.Random) -> dict[str, Any]:
    """A random typed parameter schema: string, integer (maybe bounded), number, boolean or string enum."""
    kind = rng.choice(("string", "integer", "number", "boolean", "enum"))
    if kind == "enum":
        return {"type": "string", "enum": rng.sample(("low", "medium", "high", "auto", "none", "all"), 3)}
    if kind == "integer" and rng.random() < 0.5:
        return {"type": "integer", "minimum": 0, "maximum": rng.choice((10, 100, 1000))}
    return {"type": kind}


def synthetic_tools(n: int = 200, seed: int = TOOLS200_SEED) -> ToolSet:
    """`n` synthetic tools with 1–3 typed parameters (the first required), reproducible from `seed`."""
    rng = random.Random(seed)
    tools = []
    for i in range(n):
        name = f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}_{i}"
        names = rng.sample(_PARAM_NAMES, rng.randint(1, 3))
        props = {p: _synthetic_param(rng) for p in names}
        required = [names[0]] + [p for p in names[1:] if rng.random() < 0.5]
        tools.append(ToolSpec(name, f"Synthetic tool {i}.", _object(props, required)))
    return ToolSet(tools)


_KAMEL_LINE = re.compile(r"\s*([A-Za-z_]\w*)\(([^)]*)\):\s*(.*)", re.DOTALL)


def kamel_tools(api_desc: Path) -> ToolSet:
    """The KAMEL relations: `name(arg): description` → a tool with one required string parameter.

    A name used by several relations gets the relation id appended, so all 234 stay distinct tools.
    """
    data: dict[str, str] = json.loads(api_desc.read_text(encoding="utf-8"))
    tools, seen = [], set()
    for relation, line in data.items():
        match = _KAMEL_LINE.match(line)
        if match is None:
            raise ToolDecError(f"KAMEL relation {relation}: cannot read {line!r}")
        name, arg, description = match.groups()
        if name in seen:
            name = f"{name}_{relation}"
        seen.add(name)
        param = re.sub(r"\W+", "_", arg.strip()).strip("_") or "subject"
        tools.append(ToolSpec(name, description, _object({param: {"type": "string"}}, [param])))
    return ToolSet(tools)


def bfcl_cases(path: Path, max_entries: int = DEFAULT_BFCL_ENTRIES) -> tuple[list[Case], str]:
    """The tool lists of a BFCL file's entries (evenly spaced sample of `max_entries`, 0 = all), and a note."""
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if 0 < max_entries < len(entries):
        step = len(entries) / max_entries
        picked = [entries[int(i * step)] for i in range(max_entries)]
    else:
        picked = entries
    cases, skipped = [], []
    for entry in picked:
        try:
            cases.append(Case(entry["id"], ToolSet(from_openai_tools(entry["function"]))))
        except ToolDecError as exc:
            skipped.append(f"{entry['id']}: {exc}")
    note = f"{len(cases)} of {len(entries)} entries (evenly spaced)" if len(picked) < len(entries) else (
        f"all {len(cases)} entries"
    )
    if skipped:
        note += f"; {len(skipped)} skipped (tooldec cannot read them): " + "; ".join(skipped[:3])
    return cases, note


WORKLOAD_NAMES = ("rich", "funcqa", "tools200", "kamel234", "bfcl-multiple", *CFG_WORKLOADS)


def load_workload(name: str, shared: Path, *, bfcl_entries: int = DEFAULT_BFCL_ENTRIES) -> Workload:
    """Build the workload called `name`; `shared` is the reference-data folder (holding data/)."""
    single: dict[str, Callable[[], ToolSet]] = {
        "rich": rich_tools,
        "funcqa": funcqa_tools,
        "tools200": synthetic_tools,
        "kamel234": lambda: kamel_tools(shared / "data" / "kamel" / "api_desc.json"),
    }
    if name in single:
        return Workload(name, (Case(name, single[name]()),))
    if name in CFG_WORKLOADS:
        return Workload(name, (grammar_case(name, shared),), CFG_NOTES[name])
    if name == "bfcl-multiple":
        cases, note = bfcl_cases(shared / "data" / "bfcl" / "BFCL_v4_multiple.json", bfcl_entries)
        return Workload(name, tuple(cases), note)
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOAD_NAMES)}")
