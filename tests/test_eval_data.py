"""Benchmark loaders on a small fake shared folder, the KAMEL tool set, and (slow) the real data."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tooldec.errors import ToolSpecError
from tooldec.eval.data import (
    DataError,
    file_sha256,
    funcqa_prompt,
    load_bfcl,
    load_funcqa,
    load_kamel,
    load_kamel_relations,
    load_restbench,
    shared_root,
)
from tooldec.toolsets import kamel_tools
from tooldec.toolsets.kamel import parse_relation_doc


def _write(root: Path, relative: str, content: object) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A shared folder with a few items of every benchmark."""
    _write(
        tmp_path, "data/funcqa/funcqa_oh.json", [{"question": "2+3?", "answer": 5, "func": "<add>(2,3)=5"}]
    )
    _write(
        tmp_path,
        "data/funcqa/funcqa_mh.json",
        [
            {
                "question": "q",
                "answer": "32.38",
                "calculation": ["<multiply>(67,29)=1943", "<divide>(1943,60)=32.38"],
            }
        ],
    )
    for split in ("oh", "mh"):
        _write(tmp_path, f"data/funcqa/template_{split}/llama_func.txt", "Use <add>.\n\nQ: [QUESTION]\nA:")
        _write(tmp_path, f"data/funcqa/template_{split}/llama_general.txt", "Q: [QUESTION]\nA:")
    _write(tmp_path, "data/kamel/func_dict.json", {"P2": 1, "P1": 0, "P3": 2})
    _write(
        tmp_path,
        "data/kamel/api_desc.json",
        {
            "P1": "capital(country): gets the capital",
            "P2": "location(name): where",
            "P3": "location(place): where",
        },
    )
    _write(
        tmp_path,
        "data/kamel/test_first_10.json",
        [
            {
                "question": "Capital of France?",
                "api": "P1",
                "answer": [{"chosen": "Paris", "alternative": ["Paris", "Lutetia"]}],
            }
        ],
    )
    _write(
        tmp_path,
        "data/restbench/tmdb.json",
        [{"query": "q", "solution": [" GET /search/movie ", "GET /movie/{movie_id}"]}],
    )
    _write(tmp_path, "data/restbench/tmdb_oas.json", {"openapi": "3.0.0", "paths": {}})
    function = {
        "name": "f",
        "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    }
    entries = [
        {
            "id": f"simple_python_{i}",
            "question": [[{"role": "user", "content": "hi"}]],
            "function": [function],
        }
        for i in range(2)
    ]
    _write(tmp_path, "data/bfcl/BFCL_v4_simple_python.json", "\n".join(json.dumps(e) for e in entries) + "\n")
    answers = [{"id": f"simple_python_{i}", "ground_truth": [{"f": {"a": [i]}}]} for i in range(2)]
    _write(
        tmp_path,
        "data/bfcl/possible_answer/BFCL_v4_simple_python.json",
        "\n".join(json.dumps(a) for a in answers),
    )
    irrelevant = [
        {"id": "irrelevance_0", "question": [[{"role": "user", "content": "hi"}]], "function": [function]}
    ]
    _write(tmp_path, "data/bfcl/BFCL_v4_irrelevance.json", json.dumps(irrelevant[0]))
    return tmp_path


def test_shared_root_from_argument_env_and_error(
    shared: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shared_root(shared) == shared
    monkeypatch.setenv("TOOLDEC_SHARED", str(shared))
    assert shared_root() == shared
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(DataError, match="TOOLDEC_SHARED"):
        shared_root(empty)


def test_funcqa(shared: Path) -> None:
    oh = load_funcqa("oh", shared)
    assert oh.items[0].answer == 5.0 and oh.items[0].calls == ("<add>(2,3)=5",)
    assert funcqa_prompt(oh.template, "2+3?").endswith("Q: 2+3?\nA:")
    mh = load_funcqa("funcqa-mh", shared)
    assert mh.items[0].answer == 32.38 and len(mh.items[0].calls) == 2
    assert set(mh.files) == {
        "data/funcqa/funcqa_mh.json",
        "data/funcqa/template_mh/llama_func.txt",
        "data/funcqa/template_mh/llama_general.txt",
    }
    path = shared / "data/funcqa/funcqa_mh.json"
    assert (
        mh.files["data/funcqa/funcqa_mh.json"]
        == hashlib.sha256(path.read_bytes()).hexdigest()
        == file_sha256(path)
    )
    with pytest.raises(DataError):
        load_funcqa("xx", shared)
    with pytest.raises(DataError):
        funcqa_prompt("no slot", "q")


def test_kamel_items_and_relations(shared: Path) -> None:
    data = load_kamel(10, shared)
    assert data.items[0].relation == "P1"
    assert data.items[0].answers == (("Paris", "Lutetia"),)
    relations, files = load_kamel_relations(shared)
    assert [r for r, _ in relations] == ["P1", "P2", "P3"]
    assert "data/kamel/api_desc.json" in files
    with pytest.raises(DataError, match="K=7"):
        load_kamel(7, shared)
    with pytest.raises(DataError, match="missing"):
        load_kamel(30, shared)


def test_restbench(shared: Path) -> None:
    data = load_restbench("restbench-tmdb", shared)
    assert data.items[0].solution == ("GET /search/movie", "GET /movie/{movie_id}")
    assert data.spec["paths"] == {}
    with pytest.raises(DataError):
        load_restbench("twitter", shared)


def test_bfcl(shared: Path) -> None:
    data = load_bfcl("simple", shared)
    assert [i.possible_answer for i in data.items] == [[{"f": {"a": [0]}}], [{"f": {"a": [1]}}]]
    assert data.category == "simple_python" and len(data.files) == 2
    irrelevance = load_bfcl("bfcl-irrelevance", shared)
    assert irrelevance.items[0].possible_answer is None
    with pytest.raises(DataError, match="unknown BFCL category"):
        load_bfcl("live_simple", shared)
    with pytest.raises(DataError, match="missing"):
        load_bfcl("parallel", shared)


def test_kamel_tool_set(shared: Path) -> None:
    relations, _ = load_kamel_relations(shared)
    kamel = kamel_tools(relations)
    assert kamel.tools.names == ("capital", "location", "location_2")
    assert kamel.tool_of == {"P1": "capital", "P2": "location", "P3": "location_2"}
    assert kamel.relation_of["location_2"] == "P3"
    assert kamel.descriptions["capital"] == "gets the capital"
    assert kamel.tools["location_2"].description == ""
    assert kamel.tools["location_2"].parameters == {
        "type": "object",
        "properties": {"place": {"type": "string"}},
        "required": ["place"],
    }
    assert kamel_tools(relations, 2).tools.names == ("capital", "location")
    with pytest.raises(ValueError):
        kamel_tools(relations, 0)


def test_relation_docs() -> None:
    assert parse_relation_doc("matches_played(title/name): gets matches.") == (
        "matches_played",
        ["title_or_name"],
        "gets matches.",
    )
    assert parse_relation_doc("event_winner(event_name, event_year): gets it")[1] == [
        "event_name",
        "event_year",
    ]
    with pytest.raises(ToolSpecError):
        parse_relation_doc("no signature here")
    with pytest.raises(ToolSpecError):
        parse_relation_doc("f(a, a): twice")


SHARED = Path(os.environ.get("TOOLDEC_SHARED", "../shared"))


@pytest.mark.parametrize("split", ["oh", "mh"])
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "data" / "funcqa").is_dir(), reason="../shared/data is not present")
def test_real_funcqa(split: str) -> None:
    data = load_funcqa(split, SHARED)
    assert len(data.items) == {"oh": 60, "mh": 68}[split]
    assert "[QUESTION]" in data.template and "<add>" in data.template


@pytest.mark.parametrize("k", [10, 20, 30, 60, 100, 234])
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "data" / "kamel").is_dir(), reason="../shared/data is not present")
def test_real_kamel_relations_are_among_the_first_k_tools(k: int) -> None:
    relations, _ = load_kamel_relations(SHARED)
    kamel = kamel_tools(relations, k)
    assert len(kamel.tools) == k
    data = load_kamel(k, SHARED)
    assert len(data.items) == 500
    assert all(item.relation in kamel.tool_of for item in data.items)


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "data" / "kamel").is_dir(), reason="../shared/data is not present")
def test_real_kamel_has_all_234_relations_with_unique_names() -> None:
    relations, _ = load_kamel_relations(SHARED)
    kamel = kamel_tools(relations)
    assert len(kamel.tools) == 234 == len(kamel.relation_of)
    assert kamel.tool_of["P1408"] == "broadcasted_places"


@pytest.mark.parametrize(("scenario", "n"), [("tmdb", 100), ("spotify", 57)])
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "data" / "restbench").is_dir(), reason="../shared/data is not present")
def test_real_restbench(scenario: str, n: int) -> None:
    data = load_restbench(scenario, SHARED)
    assert len(data.items) == n
    assert all(
        step.split(" ")[0] in {"GET", "POST", "PUT", "DELETE"} for i in data.items for step in i.solution
    )
