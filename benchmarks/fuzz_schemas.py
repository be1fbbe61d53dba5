"""Issue 14: the differential schema fuzzer of tests/test_fuzz_schemas.py, run long.

Draws `--schemas` schemas from the test's keyword grammar with their instances (valid ones from
hypothesis-jsonschema, mutants of them, arbitrary JSON values, the values of `--walks` random walks of the guide), compiles each as `tooldec check-schemas` does and
compares the guide with `jsonschema` on every instance. Each disagreement is shrunk to a minimal example (keywords
and members removed while it persists) and counted by category: its direction (accepted-invalid is a soundness
bug, rejected-valid a value the grammar leaves out) and, for accepted-invalid, the keyword `jsonschema` names, for
rejected-valid the keywords of the minimal schema. Writes results/fuzz_schemas.json and results/fuzz_schemas.md.
`--strict` checks the strict reading of tool calls instead (`compile_schema(..., additional_properties=False)`
against `jsonschema` on the test's `strict_reference(schema)`) and writes results/fuzz_schemas_strict.*.

    python benchmarks/fuzz_schemas.py [--schemas 2000] [--seed 0] [--strict] [--tokenizer ../shared/tokenizers/llama3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tooldec.compiler import Compiler
from tooldec.vocab import Vocabulary

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_fuzz_schemas import (  # the test defines the grammar
    SCHEMAS,
    Disagreement,
    SchemaCheck,
    check_schema,
    draw_instances,
)

MAX_SHRINK_CHECKS = 60  # schema checks one minimisation may spend
MAX_MINIMISED = 100  # disagreements minimised in one run (the first of each schema; the rest keep their raw form)


def run(
    compiler: Compiler, n: int, seed_value: int, args_walks: int, bar: Progress, *, strict: bool = False
) -> list[SchemaCheck]:
    """Check `n` drawn schemas (hypothesis' generate phase only: no shrinking, no example database), each also
    on `args_walks` random walks of its guide, in the open or the `strict` reading."""
    out: list[SchemaCheck] = []
    task = bar.add_task("schemas", total=n)

    @seed(seed_value)
    @settings(
        max_examples=n, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(schema=SCHEMAS, data=st.data())
    def one(schema: Any, data: st.DataObject) -> None:
        walk_seed = data.draw(st.integers(0, 2**16))
        instances = draw_instances(data, schema)
        out.append(check_schema(schema, instances, compiler, walks=args_walks, seed=walk_seed, strict=strict))
        bar.update(task, advance=1, description=f"schemas ({sum(len(r.disagreements) for r in out)} disagreements)")

    one()
    return out


# -- minimal examples ---------------------------------------------------------------------------------------
def _size(v: Any) -> int:
    return len(json.dumps(v))


def _smaller(v: Any) -> list[Any]:
    """Values one step simpler than `v`: a member or item removed, a child in its place, a subvalue replaced by
    a trivial one."""
    out: list[Any] = []
    if isinstance(v, dict):
        for k in v:
            out.append({x: y for x, y in v.items() if x != k})
        for k, sub in v.items():
            out.extend({**v, k: s} for s in _smaller(sub))
    elif isinstance(v, list):
        for i in range(len(v)):
            out.append(v[:i] + v[i + 1:])
        for i, sub in enumerate(v):
            out.extend(v[:i] + [s] + v[i + 1:] for s in _smaller(sub))
    children = list(v.values()) if isinstance(v, dict) else v if isinstance(v, list) else []
    children += [g for c in children if isinstance(c, list) for g in c]  # through anyOf / prefixItems lists
    out.extend(c for c in children if isinstance(c, dict))  # a subschema in place of its parent
    if v not in ({}, [], None, True, 0, ""):
        out.extend([{}, True, None, 0])
    return [c for c in out if _size(c) < _size(v)]


def byte_compiler() -> Compiler:
    """A compiler over the 256 single bytes: the same languages as any vocabulary, the cheapest index to build."""
    return Compiler(Vocabulary.from_bytes([bytes([b]) for b in range(256)] + [None], eos_id=256))


def minimise(d: Disagreement, compiler: Compiler, *, strict: bool = False) -> Disagreement:
    """Shrink the schema, then the instance, greedily while the same disagreement persists (in one reading)."""
    budget = [MAX_SHRINK_CHECKS]

    def still(schema: Any, instances: list[Any]) -> Disagreement | None:
        """The smallest of `instances` on which `schema` still disagrees the same way (one compile)."""
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        try:
            res = check_schema(schema, instances, compiler, strict=strict)
        except Exception:  # noqa: BLE001 - a candidate jsonschema itself cannot read is just not smaller
            return None
        same = [x for x in res.disagreements if x.direction == d.direction]
        return min(same, key=lambda x: _size(x.instance)) if same else None

    best = d
    improved = True
    while improved and budget[0] > 0:
        improved = False
        for cand in sorted(_smaller(best.schema), key=_size):
            if _valid_schema(cand) and (found := still(cand, [best.instance])):
                best, improved = found, True
                break
        if not improved and (found := still(best.schema, _smaller(best.instance))):
            best, improved = found, True
    return best


def _valid_schema(schema: Any) -> bool:
    """Whether a candidate is a schema its metaschema accepts (shrinking must not reach `{"type": {}}`)."""
    if not isinstance(schema, dict):
        return False
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return False
    return True


def _keywords(schema: Any) -> set[str]:
    """Every schema keyword used in a schema (property names and $defs names left out)."""
    out: set[str] = set()
    if isinstance(schema, dict):
        for k, v in schema.items():
            out.add(k)
            if k in ("properties", "$defs", "patternProperties"):
                for sub in v.values() if isinstance(v, dict) else ():
                    out |= _keywords(sub)
            elif k in ("enum", "const", "required"):
                continue
            elif isinstance(v, list):
                for sub in v:
                    out |= _keywords(sub)
            else:
                out |= _keywords(v)
    return out


def category(d: Disagreement) -> str:
    """`direction: keyword(s)` of a (minimal) disagreement."""
    if d.direction == "accepted-invalid":
        return f"accepted-invalid: {d.keyword}"
    kws = sorted(_keywords(d.schema) - {"$defs"}) or ["any value"]
    return f"rejected-valid: {', '.join(kws)}"


# -- report -------------------------------------------------------------------------------------------------
def report(results: list[SchemaCheck], seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    """Figures, disagreement counts by category and one minimal example per category."""
    status = Counter(r.status for r in results)
    reasons = Counter(r.reason.split(":")[0] for r in results if r.status == "unsupported")
    compiled = [r for r in results if r.status == "compiled"]
    by_cat: Counter[str] = Counter()
    examples: dict[str, dict[str, Any]] = {}
    minimised = 0
    shrinker = byte_compiler()
    for r in compiled:
        if not r.disagreements:
            continue
        first = r.disagreements[0]
        if minimised < MAX_MINIMISED:
            first = minimise(first, shrinker, strict=args.strict)
            minimised += 1
        cat = category(first)
        by_cat[cat] += len(r.disagreements)
        ex = {"schema": first.schema, "instance": first.instance, "text": first.text}
        if cat not in examples or _size(ex) < _size(examples[cat]):
            examples[cat] = ex
    directions = Counter(d.direction for r in compiled for d in r.disagreements)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end",
        "settings": {"schemas": args.schemas, "seed": args.seed, "walks": args.walks, "tokenizer": str(args.tokenizer),
                     "reading": "strict" if args.strict else "open"},
        "seconds": round(seconds, 1),
        "schemas": len(results),
        "compiled": status["compiled"],
        "unsupported": status["unsupported"],
        "crashed": status["crashed"],
        "unsupported_reasons": dict(reasons.most_common()),
        "instances": sum(r.instances for r in compiled),
        "valid_instances": sum(r.valid for r in compiled),
        "invalid_instances": sum(r.instances - r.valid for r in compiled),
        "accepted_invalid": directions["accepted-invalid"],
        "rejected_valid": directions["rejected-valid"],
        "disagreements_by_category": dict(by_cat.most_common()),
        "minimal_examples": examples,
        "crashes": [r.reason[-400:] for r in results if r.status == "crashed"][:5],
    }


def markdown(doc: dict[str, Any]) -> str:
    """The report as a Markdown page."""
    lines = [
        "# Differential schema fuzzer (issue 14)",
        "",
        (
            f"{doc['date']}; {doc['machine']}; tokenizer `{doc['settings']['tokenizer']}`, "
            f"{doc['seconds']} s. `python benchmarks/fuzz_schemas.py --schemas {doc['settings']['schemas']} "
            f"--seed {doc['settings']['seed']}{' --strict' if doc['settings']['reading'] == 'strict' else ''}`"
        ),
        "",
        "| figure | value |",
        "|---|---|",
    ]
    for key in ("schemas", "compiled", "unsupported", "crashed", "instances", "valid_instances", "invalid_instances",
                "accepted_invalid", "rejected_valid"):
        lines.append(f"| {key} | {doc[key]:,} |")
    lines += ["", "Unsupported (refused with UnsupportedSchemaError or invalid):", ""]
    lines += [f"- {k}: {v}" for k, v in doc["unsupported_reasons"].items()] or ["- none"]
    lines += ["", "## Disagreements by category", "", "| category | instances |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in doc["disagreements_by_category"].items()] or ["| none | 0 |"]
    lines += ["", "## Minimal examples", ""]
    for cat, ex in doc["minimal_examples"].items():
        lines += [f"- **{cat}**: schema `{json.dumps(ex['schema'])}`, text `{ex['text']}`"]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the fuzzer and write the JSON and Markdown results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = Path(os.environ.get("TOOLDEC_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    parser.add_argument("--schemas", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--walks", type=int, default=3, help="Random walks of each guide, checked valid.")
    parser.add_argument("--tokenizer", type=Path, default=shared / "tokenizers" / "llama3")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--strict", action="store_true", help="The strict reading of tool calls (undeclared keys refused).")
    args = parser.parse_args()
    sys.set_int_max_str_digits(0)
    compiler = Compiler(Vocabulary.from_file(args.tokenizer))
    t0 = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as bar:
        results = run(compiler, args.schemas, args.seed, args.walks, bar, strict=args.strict)
    doc = report(results, time.perf_counter() - t0, args)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "fuzz_schemas_strict" if args.strict else "fuzz_schemas"
    (args.out / f"{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (args.out / f"{name}.md").write_text(markdown(doc), encoding="utf-8")
    summary = {k: doc[k] for k in ("schemas", "compiled", "instances", "accepted_invalid", "rejected_valid")}
    print(json.dumps(summary | {"by_category": doc["disagreements_by_category"]}))


if __name__ == "__main__":
    main()
