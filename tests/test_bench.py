"""The benchmark harness on a small trained tokenizer: workloads, forced calls, check, figures, report, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import validate
from tokenizers import Tokenizer
from typer.testing import CliRunner

from tooldec.bench import report
from tooldec.bench.calls import forced_calls, unknown_call_text
from tooldec.bench.engines import ENGINES, Engine
from tooldec.bench.engines.tooldec_engine import TooldecEngine, TooldecSession
from tooldec.bench.runner import CellResult, CheckFailed, check_engine, prepare_calls, run, run_cell
from tooldec.bench.schema import call_schema, closed
from tooldec.bench.workloads import bfcl_cases, kamel_tools, load_workload, rich_tools, synthetic_tools
from tooldec.specs import ToolSet
from tooldec.toolsets import funcqa_tools
from tooldec.vocab import Vocabulary

KEYS = {"engine", "workload", "tokenizer", "compile_ms", "mask_us_median", "mask_us_p99", "first_mask_us"}


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory, bytelevel_tokenizer: Tokenizer) -> Path:
    """The byte-level fixture saved as SHARED/tokenizers/tiny/tokenizer.json."""
    folder = tmp_path_factory.mktemp("shared") / "tokenizers" / "tiny"
    folder.mkdir(parents=True)
    bytelevel_tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def vocab(tok_dir: Path) -> Vocabulary:
    """tooldec's view of the saved fixture."""
    return Vocabulary.from_file(tok_dir)


def test_synthetic_tools_are_reproducible_with_one_to_three_params() -> None:
    tools = synthetic_tools()
    assert len(tools) == 200
    assert all(1 <= len(t.parameters["properties"]) <= 3 for t in tools)
    assert [t.to_openai() for t in tools] == [t.to_openai() for t in synthetic_tools()]


def test_kamel_tools_one_string_parameter_and_unique_names(tmp_path: Path) -> None:
    desc = {"P1": "location(name): where it is", "P2": "location(title/name): where", "P3": "a(x, y): two"}
    (tmp_path / "api_desc.json").write_text(json.dumps(desc))
    tools = kamel_tools(tmp_path / "api_desc.json")
    assert tools.names == ("location", "location_P2", "a")
    assert tools["location_P2"].parameters == {
        "type": "object", "properties": {"title_name": {"type": "string"}}, "required": ["title_name"]
    }


def test_bfcl_cases_sample_and_skip(tmp_path: Path) -> None:
    good = {"id": "m0", "function": [{"name": "f", "parameters": {"type": "dict", "properties": {}}}]}
    bad = {"id": "m1", "function": [{"name": "bad name", "parameters": {}}]}
    path = tmp_path / "multiple.json"
    path.write_text("\n".join(json.dumps(e) for e in (good, bad, good | {"id": "m2"})))
    cases, note = bfcl_cases(path, max_entries=0)
    assert [c.name for c in cases] == ["m0", "m2"]
    assert "1 skipped" in note
    assert len(bfcl_cases(path, max_entries=1)[0]) == 1


def test_unknown_workload_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        load_workload("nope", tmp_path)


@pytest.mark.parametrize("tools", [rich_tools(), funcqa_tools(), synthetic_tools(20)], ids=["rich", "funcqa", "syn"])
def test_forced_calls_are_valid_under_the_peer_schema(tools: ToolSet, vocab: Vocabulary) -> None:
    schema = call_schema(tools)
    for text in forced_calls(tools, vocab):
        validate(json.loads(text), schema)
    assert json.loads(unknown_call_text(tools))["name"] not in tools


def test_closed_schema_closes_nested_objects() -> None:
    schema = closed(rich_tools()["book_flight"].parameters)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["lead_passenger"]["additionalProperties"] is False


def test_tooldec_engine_passes_the_check_and_reports_figures(tok_dir: Path, vocab: Vocabulary) -> None:
    workloads = [load_workload("rich", tok_dir), load_workload("funcqa", tok_dir)]
    results = run(["tooldec"], workloads, {"tiny": tok_dir}, repeats=2)
    assert [r.status for r in results] == ["ok", "ok"]
    rows = report.rows(results)
    assert KEYS <= set(rows[0])
    assert all(rows[0][k] is not None for k in KEYS)
    assert rows[0]["compile_ratio"] == 1.0
    assert "| rich | tiny | tooldec |" in report.markdown(report.document(results, {"repeats": 2}))


class _Permissive(TooldecSession):
    """A broken engine's session: every token is in its mask and every advance succeeds."""

    def allowed(self, token_id: int) -> bool:
        return True

    def advance(self, token_id: int) -> bool:
        if self.guide.accepts(token_id):
            super().advance(token_id)
        return True


class _Broken(TooldecEngine):
    """tooldec with its constraint switched off."""

    name = "broken"

    def start(self, compiled: object) -> _Permissive:
        return _Permissive(compiled, self.vocab.size)  # type: ignore[arg-type]


def test_an_engine_that_allows_everything_fails_the_check(tok_dir: Path, vocab: Vocabulary) -> None:
    eos = min(vocab.eos_ids)
    items = prepare_calls(load_workload("rich", tok_dir), vocab, eos)
    engine = _Broken(tok_dir, vocab, eos)
    with pytest.raises(CheckFailed, match="unknown tool"):
        check_engine(engine, items[0])
    result = run_cell(engine, items, CellResult("broken", "rich", "tiny"), repeats=1)
    assert result.status == "failed"
    assert result.compile_ms is None


@pytest.mark.parametrize("name", ["xgrammar", "llguidance", "outlines-core"])
def test_peer_engines_constrain(name: str, tok_dir: Path, vocab: Vocabulary) -> None:
    cls: type[Engine] = ENGINES[name]
    if cls.missing():
        pytest.skip(cls.missing())
    eos = min(vocab.eos_ids)
    items = prepare_calls(load_workload("funcqa", tok_dir), vocab, eos)
    result = run_cell(cls(tok_dir, vocab, eos), items, CellResult(name, "funcqa", "tiny"), repeats=1)
    assert result.status == "ok", result.reason
    assert result.mask_us_median is not None


def test_cli_bench_json_last_line(tok_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tooldec.cli import app

    monkeypatch.setattr(ENGINES["xgrammar"], "missing", classmethod(lambda cls: "not here"))
    shared = tok_dir.parent.parent
    args = ["bench", "--engines", "tooldec,xgrammar", "--workloads", "rich", "--tokenizers", "tiny",
            "--repeats", "1", "--json", "--shared", str(shared), "--out", str(shared / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["engine"], r["status"]) for r in rows] == [("tooldec", "ok"), ("xgrammar", "skipped")]
    assert KEYS <= set(rows[0])
    assert (shared / "out" / "bench.json").is_file() and (shared / "out" / "bench.md").is_file()


def test_ratios_are_peer_over_tooldec_and_skip_noise() -> None:
    base = {"workload": "w", "tokenizer": "t", "status": "ok", "compile_ms": 10.0, "rss_mb": 0.1}
    rows = report.add_ratios([base | {"engine": "tooldec"}, base | {"engine": "peer", "compile_ms": 25.0}])
    assert rows[1]["compile_ratio"] == 2.5
    assert rows[1]["rss_ratio"] is None
