"""Benchmark data from the shared folder: FuncQA, KAMEL, RestBench and BFCL items, with file hashes.

The shared root is an argument, else `$TOOLDEC_SHARED`, else `../shared`; each benchmark lives in
`<root>/data/<benchmark>/`. Every loader returns the items together with the sha256 of each file it read
(paths relative to the root), which results.json records so that a run names the exact data it used.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tooldec.errors import ToolDecError

KAMEL_SIZES = (10, 20, 30, 60, 100, 234)
"""The K of KAMEL's test_first_K.json files (questions whose relation is among the first K)."""

BFCL_CATEGORIES = {
    "simple": "simple_python",
    "simple_python": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
}
"""Accepted BFCL category names (hyphens read as underscores) and the file stem each one reads."""

FUNCQA_SPLITS = ("oh", "mh")
RESTBENCH_SCENARIOS = ("tmdb", "spotify")


class DataError(ToolDecError, FileNotFoundError):
    """Benchmark data that is missing or not in the expected shape."""


@dataclass(frozen=True)
class FuncQAItem:
    """A FuncQA question with its numeric answer and the gold calls in ToolkenGPT syntax."""

    id: str
    question: str
    answer: float
    calls: tuple[str, ...]


@dataclass(frozen=True)
class KamelItem:
    """A KAMEL question, the Wikidata relation id that answers it, and the accepted answers of each object."""

    id: str
    question: str
    relation: str
    answers: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class RestBenchItem:
    """A RestBench query and its gold solution path of `METHOD /path/{template}` steps."""

    id: str
    query: str
    solution: tuple[str, ...]


@dataclass(frozen=True)
class BfclItem:
    """A BFCL entry: the chat turns, the function documentation and the possible answers (None: no call)."""

    id: str
    category: str
    question: list[list[dict[str, Any]]]
    functions: list[dict[str, Any]]
    possible_answer: list[dict[str, dict[str, list[Any]]]] | None


@dataclass(frozen=True)
class FuncQAData:
    """A FuncQA split with ToolkenGPT's few-shot prompt templates (`[QUESTION]` marks the slot)."""

    split: str
    items: tuple[FuncQAItem, ...]
    template: str
    template_general: str
    files: dict[str, str]


@dataclass(frozen=True)
class KamelData:
    """The KAMEL questions whose relation is among the first `k` relations."""

    k: int
    items: tuple[KamelItem, ...]
    files: dict[str, str]


@dataclass(frozen=True)
class RestBenchData:
    """A RestBench scenario's queries and its OpenAPI document."""

    scenario: str
    items: tuple[RestBenchItem, ...]
    spec: dict[str, Any]
    files: dict[str, str]


@dataclass(frozen=True)
class BfclData:
    """One BFCL category's entries, with their possible answers joined in."""

    category: str
    items: tuple[BfclItem, ...]
    files: dict[str, str]


def shared_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The shared folder: `root`, else `$TOOLDEC_SHARED`, else `../shared`; DataError if it has no data/."""
    chosen = Path(root if root is not None else os.environ.get("TOOLDEC_SHARED", "../shared"))
    if not (chosen / "data").is_dir():
        raise DataError(
            f"no benchmark data in {str(chosen)!r} (expected {str(chosen / 'data')!r}); "
            "pass the shared folder or set TOOLDEC_SHARED"
        )
    return chosen


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Reader:
    """Reads files under one shared root and remembers the hash of each."""

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        """Resolve the shared root; no file is read yet."""
        self.root = shared_root(root)
        self.files: dict[str, str] = {}

    def path(self, relative: str) -> Path:
        """The file `relative` under the root, hashed; DataError when it is missing."""
        path = self.root / relative
        if not path.is_file():
            raise DataError(f"missing benchmark file {str(path)!r}")
        self.files[relative] = file_sha256(path)
        return path

    def text(self, relative: str) -> str:
        """The text of a file."""
        return self.path(relative).read_text(encoding="utf-8")

    def json(self, relative: str) -> Any:
        """A JSON document."""
        try:
            return json.loads(self.text(relative))
        except json.JSONDecodeError as err:
            raise DataError(f"{relative!r} is not valid JSON: {err}") from err

    def json_lines(self, relative: str) -> list[Any]:
        """A JSON Lines file (BFCL's .json files hold one entry per line)."""
        try:
            return [json.loads(line) for line in self.text(relative).splitlines() if line.strip()]
        except json.JSONDecodeError as err:
            raise DataError(f"{relative!r} is not valid JSON Lines: {err}") from err


def load_funcqa(split: str, root: str | os.PathLike[str] | None = None) -> FuncQAData:
    """FuncQA one-hop (`oh`, 60 questions) or multi-hop (`mh`, 68) with ToolkenGPT's llama templates."""
    split = split.removeprefix("funcqa-").removeprefix("funcqa_")
    if split not in FUNCQA_SPLITS:
        raise DataError(f"unknown FuncQA split {split!r}; known: {', '.join(FUNCQA_SPLITS)}")
    reader = _Reader(root)
    raw = reader.json(f"data/funcqa/funcqa_{split}.json")
    items = []
    for i, entry in enumerate(_list(raw, "FuncQA")):
        calls = entry.get("calculation", entry.get("func", []))
        items.append(
            FuncQAItem(
                id=f"funcqa-{split}-{i}",
                question=entry["question"],
                answer=float(entry["answer"]),
                calls=tuple([calls] if isinstance(calls, str) else calls),
            )
        )
    template = reader.text(f"data/funcqa/template_{split}/llama_func.txt")
    general = reader.text(f"data/funcqa/template_{split}/llama_general.txt")
    return FuncQAData(split, tuple(items), template, general, reader.files)


def funcqa_prompt(template: str, question: str) -> str:
    """A FuncQA template with the question in its `[QUESTION]` slot."""
    if "[QUESTION]" not in template:
        raise DataError("FuncQA template has no [QUESTION] slot")
    return template.replace("[QUESTION]", question)


def load_kamel(k: int, root: str | os.PathLike[str] | None = None) -> KamelData:
    """KAMEL's test_first_K questions (K in KAMEL_SIZES); the relation id of each is its `api`."""
    if k not in KAMEL_SIZES:
        raise DataError(f"KAMEL has no test set for K={k}; known: {', '.join(map(str, KAMEL_SIZES))}")
    reader = _Reader(root)
    raw = reader.json(f"data/kamel/test_first_{k}.json")
    items = []
    for i, entry in enumerate(_list(raw, "KAMEL")):
        answers = tuple(
            tuple(dict.fromkeys([a["chosen"], *a.get("alternative", [])])) for a in entry.get("answer", [])
        )
        items.append(KamelItem(f"kamel-{k}-{i}", entry["question"], entry["api"], answers))
    return KamelData(k, tuple(items), reader.files)


def load_kamel_relations(
    root: str | os.PathLike[str] | None = None,
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """All KAMEL relations as (relation id, `name(arg): description`) in func_dict order, and file hashes."""
    reader = _Reader(root)
    order = reader.json("data/kamel/func_dict.json")
    desc = reader.json("data/kamel/api_desc.json")
    if not isinstance(order, Mapping) or not isinstance(desc, Mapping):
        raise DataError("KAMEL func_dict.json and api_desc.json must be JSON objects")
    missing = [rel for rel in order if rel not in desc]
    if missing:
        raise DataError(f"KAMEL relations without a description in api_desc.json: {missing[:5]}")
    relations = [(rel, desc[rel]) for rel in sorted(order, key=order.__getitem__)]
    return relations, reader.files


def load_restbench(scenario: str, root: str | os.PathLike[str] | None = None) -> RestBenchData:
    """RestBench TMDB (100 queries) or Spotify (57) with the scenario's OpenAPI document."""
    scenario = scenario.removeprefix("restbench-").removeprefix("restbench_")
    if scenario not in RESTBENCH_SCENARIOS:
        raise DataError(f"unknown RestBench scenario {scenario!r}; known: {', '.join(RESTBENCH_SCENARIOS)}")
    reader = _Reader(root)
    raw = reader.json(f"data/restbench/{scenario}.json")
    items = tuple(
        RestBenchItem(f"{scenario}-{i}", entry["query"], tuple(step.strip() for step in entry["solution"]))
        for i, entry in enumerate(_list(raw, "RestBench"))
    )
    spec = reader.json(f"data/restbench/{scenario}_oas.json")
    if not isinstance(spec, dict) or "paths" not in spec:
        raise DataError(f"{scenario}_oas.json is not an OpenAPI document")
    return RestBenchData(scenario, items, spec, reader.files)


def load_bfcl(category: str, root: str | os.PathLike[str] | None = None) -> BfclData:
    """A BFCL v4 category (simple, multiple, parallel, parallel_multiple, irrelevance) with possible answers."""
    key = category.removeprefix("bfcl-").removeprefix("bfcl_").replace("-", "_")
    if key not in BFCL_CATEGORIES:
        raise DataError(f"unknown BFCL category {category!r}; known: {', '.join(BFCL_CATEGORIES)}")
    stem = BFCL_CATEGORIES[key]
    reader = _Reader(root)
    entries = reader.json_lines(f"data/bfcl/BFCL_v4_{stem}.json")
    answers: dict[str, Any] = {}
    if stem != "irrelevance":
        for line in reader.json_lines(f"data/bfcl/possible_answer/BFCL_v4_{stem}.json"):
            answers[line["id"]] = line["ground_truth"]
    items = []
    for entry in entries:
        if stem != "irrelevance" and entry["id"] not in answers:
            raise DataError(f"BFCL entry {entry['id']!r} has no possible answer")
        items.append(
            BfclItem(entry["id"], stem, entry["question"], entry["function"], answers.get(entry["id"]))
        )
    return BfclData(stem, tuple(items), reader.files)


def _list(raw: Any, what: str) -> list[dict[str, Any]]:
    """`raw` when it is a list of objects, else DataError."""
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        raise DataError(f"{what} data must be a JSON list of objects")
    return raw
