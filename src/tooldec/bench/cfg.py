"""The context-free-grammar workloads (`cfg-json`, `cfg-sql`, `cfg-arith`, `cfg-pycall`, `cfg-nested`): a Lark
grammar of `SHARED/data/cfg/` that every engine compiles through its own Lark front end, and its sample text,
which the runner forces token by token (as it forces tool calls)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tooldec.bench.engines.base import BatchDriver, Engine

CFG_WORKLOADS = {
    "cfg-json": "json",
    "cfg-sql": "sql",
    "cfg-arith": "arith_leftrec",
    "cfg-pycall": "pycall",
    "cfg-nested": "nested300",
}
"""Workload name → stem of `<stem>.lark` and `<stem>.sample.txt` in `SHARED/data/cfg/`."""

CFG_NOTES = {
    "cfg-json": "JSON with free whitespace (%ignore), string escapes and exponents",
    "cfg-sql": "a SELECT subset: keywords, joins, nested boolean expressions, 7 function names",
    "cfg-arith": "left-recursive arithmetic (expr: expr \"+\" term), not LL",
    "cfg-pycall": "Python-like calls: keyword arguments, lists, dicts, nested calls, one call per line",
    "cfg-nested": "arrays nested 300 deep, no whitespace",
}
"""What each grammar exercises (the workload's note in the report)."""


@dataclass(frozen=True)
class GrammarCase:
    """One grammar of a CFG workload and the valid sample text forced through it."""

    name: str
    grammar: str
    sample: str

    def compile(self, engine: Engine) -> Any:
        """The engine's compile of the grammar (its Lark front end), every cache off."""
        return engine.compile_grammar(self.grammar)

    def driver(self, engine: Engine, threads: int) -> BatchDriver:
        """The engine's batch path for grammar rows."""
        return engine.batch(threads)


def cfg_folder(shared: Path) -> Path:
    """`SHARED/data/cfg`, the folder of the shared Lark grammars and their samples."""
    return shared / "data" / "cfg"


def grammar_case(name: str, shared: Path) -> GrammarCase:
    """The case of CFG workload `name`; FileNotFoundError naming the folder when the shared data is absent."""
    stem = CFG_WORKLOADS[name]
    folder = cfg_folder(shared)
    grammar, sample = folder / f"{stem}.lark", folder / f"{stem}.sample.txt"
    for path in (grammar, sample):
        if not path.is_file():
            raise FileNotFoundError(
                f"workload {name}: no {path.name} in {folder} (set --shared or $TOOLDEC_SHARED to the folder "
                f"holding data/cfg/)"
            )
    return GrammarCase(name, grammar.read_text(encoding="utf-8"), sample.read_text(encoding="utf-8"))
