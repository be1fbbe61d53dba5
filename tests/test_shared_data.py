"""End-to-end checks on the reference data in ../shared (BFCL, MaskBench, RestBench) with the llama3 tokenizer.

Marked slow; skipped when ../shared (or $TOOLDEC_SHARED) is absent.
"""

from __future__ import annotations

import json
import keyword
import os
import random
from pathlib import Path

import jsonschema
import pytest

from tooldec.compiler import Compiler
from tooldec.conformance import check_file, summarize
from tooldec.sample import random_walk
from tooldec.specs import from_openai_tools, from_openapi
from tooldec.vocab import Vocabulary

SHARED = Path(os.environ.get("TOOLDEC_SHARED", Path(__file__).resolve().parents[2] / "shared"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (SHARED / "tokenizers" / "llama3").exists(), reason="../shared is not present"),
]


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return Vocabulary.from_file(SHARED / "tokenizers" / "llama3")


def _kwarg(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


BFCL_FILES = sorted((SHARED / "data" / "bfcl").glob("BFCL_v4_*.json"))


@pytest.mark.parametrize("path", BFCL_FILES, ids=lambda p: p.stem)
def test_sample_over_every_bfcl_entry_validates(llama3: Vocabulary, path: Path) -> None:
    compiler = Compiler(llama3)
    rng = random.Random(0)
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for i, entry in enumerate(entries):
        tools = from_openai_tools(entry)
        fmt = "python" if i % 2 else "json"
        if fmt == "python" and not all(_kwarg(p) for t in tools for p in t.parameters.get("properties", {})):
            fmt = "json"
        compiled = compiler.compile(tools, fmt)
        guide = random_walk(compiled.guide(), rng, max_tokens=20000)
        call = guide.result()
        spec = next(t for t in tools if t.name == call.name)
        jsonschema.validate(call.arguments, spec.parameters)


def test_maskbench_function_calling_schemas(llama3: Vocabulary) -> None:
    files = sorted(
        p for p in (SHARED / "data" / "maskbench").glob("*.json") if p.name.startswith(("BFCL", "Glaive", "MCP"))
    )
    compiler = Compiler(llama3)
    results = [check_file(p, compiler, timeout_s=20) for p in files]
    s = summarize(results)
    crashed = [(r.file, r.reason[-300:]) for r in results if r.status == "crashed"]
    assert not crashed, crashed
    assert s["compiled"] >= 0.95 * s["files"], s
    assert s["valid_accepted"] >= 0.99 * s["valid_total"], s
    assert s["invalid_rejected"] >= 0.99 * s["invalid_total"], s
    print(json.dumps(s))


def test_restbench_specs_compile(llama3: Vocabulary) -> None:
    compiler = Compiler(llama3)
    for name in ("tmdb_oas.json", "spotify_oas.json"):
        tools = from_openapi(json.loads((SHARED / "data" / "restbench" / name).read_text()))
        compiled = compiler.compile(tools, "json")
        rng = random.Random(1)
        for _ in range(5):
            call = random_walk(compiled.guide(), rng, max_tokens=20000).result()
            spec = next(t for t in tools if t.name == call.name)
            jsonschema.validate(call.arguments, spec.parameters)


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen2.5"])
def test_small_tool_sets_indexed_whole_match_the_trie_walk(tokenizer: str) -> None:
    """FuncQA's tool set is indexed whole at compile time (`share_alike`: its number states share region walks a
    few bytes deep; llama3's three-digit tokens, qwen2.5's single digits): every state's stored mask is the set a
    plain walk of the trie finds afresh."""
    import numpy as np

    from tooldec.toolsets import funcqa_tools

    vocab = Vocabulary.from_file(SHARED / "tokenizers" / tokenizer)
    index = Compiler(vocab).compile(funcqa_tools(), "json", use_cache=False).index
    assert index.core.computed == index.core.num_states - 1
    for s in range(1, index.core.num_states):
        assert index.allowed_ids(s).tolist() == np.sort(index.transitions(s)[0]).tolist(), s
