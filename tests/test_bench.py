"""The benchmark harness on a small trained tokenizer: workloads, forced calls, check, figures, batch figures,
report, CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from jsonschema import validate
from tokenizers import Tokenizer
from typer.testing import CliRunner

from tooldec.bench import report
from tooldec.bench.batch import (
    BatchCheckFailed,
    LogitsSource,
    Rows,
    Track,
    check_batch,
    check_steps,
    run_batch,
    starts,
    tracks,
    unpacked,
)
from tooldec.bench.calls import forced_calls, unknown_call_text
from tooldec.bench.engines import ENGINES, Engine
from tooldec.bench.engines.tooldec_engine import TooldecBatch, TooldecEngine, TooldecSession
from tooldec.bench.runner import (
    BatchSettings,
    CellResult,
    CheckFailed,
    check_engine,
    prepare_calls,
    run,
    run_cell,
)
from tooldec.bench.schema import call_schema
from tooldec.bench.workloads import bfcl_cases, kamel_tools, load_workload, rich_tools, synthetic_tools
from tooldec.specs import ToolSet, ToolSpec
from tooldec.toolsets import funcqa_tools
from tooldec.vocab import Vocabulary

KEYS = {"engine", "workload", "tokenizer", "compile_ms", "mask_us_median", "mask_us_p99", "first_mask_us", "request_ms"}


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


def test_peer_schema_closes_nested_objects() -> None:
    schema = call_schema(rich_tools())["properties"]["arguments"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["lead_passenger"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("parameters", "keys"),
    [
        (
            {
                "type": "object",
                "allOf": [
                    {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "string"}}, "required": ["b"]},
                ],
            },
            [{"a", "b"}],
        ),
        (
            {
                "type": "object",
                "properties": {"kind": {"type": "string"}},
                "required": ["kind"],
                "anyOf": [
                    {"properties": {"x": {"type": "integer"}}, "required": ["x"]},
                    {"properties": {"y": {"type": "string"}}, "required": ["y"]},
                ],
            },
            [{"kind", "x"}, {"kind", "y"}],
        ),
    ],
    ids=["allOf", "anyOf"],
)
def test_peer_schema_takes_the_calls_of_objects_made_of_parts(
    parameters: dict, keys: list[set[str]], vocab: Vocabulary
) -> None:
    """The grammar merges an object's parts; the peer schema must not close each part against the others."""
    tools = ToolSet([ToolSpec("parts", "", parameters)])
    texts = forced_calls(tools, vocab)
    assert texts
    for text in texts:
        assert set(json.loads(text)["arguments"]) in keys
        validate(json.loads(text), call_schema(tools))


def test_tooldec_engine_passes_the_check_and_reports_figures(tok_dir: Path, vocab: Vocabulary) -> None:
    workloads = [load_workload("rich", tok_dir), load_workload("funcqa", tok_dir)]
    results = run(["tooldec"], workloads, {"tiny": tok_dir}, repeats=2)
    assert [r.status for r in results] == ["ok", "ok"]
    rows = report.rows(results)
    assert KEYS <= set(rows[0])
    assert all(rows[0][k] is not None for k in KEYS)
    assert rows[0]["compile_ratio"] == 1.0
    assert rows[0]["request_ms"] > rows[0]["compile_ms"], "a request is its compile and then its steps"
    assert "| rich | tiny | tooldec |" in report.markdown(report.document(results, {"repeats": 2}))


def test_precompute_engine_indexes_every_state_at_compile(tok_dir: Path, vocab: Vocabulary, monkeypatch) -> None:
    """The tooldec-precompute row compiles the same language, minimized, with every state's mask built before the
    first step, where the tooldec row indexes only a large automaton lazily (past EAGER_BUDGET)."""
    from tooldec.bench.engines import ENGINES
    from tooldec.index import token_index

    lazy, whole = (ENGINES[name](tok_dir, vocab, min(vocab.eos_ids)) for name in ("tooldec", "tooldec-precompute"))
    tools = rich_tools()
    first, second = lazy.compile(tools), whole.compile(tools)
    assert second.index.core.computed == second.dfa.num_states - 1  # every state but the dead one
    assert first.index.core.computed == first.dfa.num_states - 1  # a small automaton: indexed whole too
    assert second.dfa.num_states < first.dfa.num_states
    monkeypatch.setattr(token_index, "EAGER_BUDGET", 0)
    first = lazy.compile(tools)
    assert first.index.core.computed < first.dfa.num_states - 1
    results = run(["tooldec", "tooldec-precompute"], [load_workload("rich", tok_dir)], {"tiny": tok_dir}, repeats=1)
    assert [r.status for r in results] == ["ok", "ok"]
    assert report.rows(results)[1]["compile_ratio"] is not None


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
            "--repeats", "1", "--json", "--shared", str(shared), "--out", str(shared / "out"),
            "--batch-sizes", "1,3", "--batch-steps", "4", "--note", "load test"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["engine"], r["status"]) for r in rows] == [("tooldec", "ok"), ("xgrammar", "skipped")]
    assert KEYS <= set(rows[0])
    assert [(e["batch_size"], e["status"]) for e in rows[0]["batch"]] == [(1, "ok"), (3, "ok")]
    assert [e["status"] for e in rows[1]["batch"]] == ["skipped", "skipped"]
    assert (shared / "out" / "bench.json").is_file() and (shared / "out" / "bench.md").is_file()
    doc = json.loads((shared / "out" / "bench.json").read_text())
    assert doc["settings"]["batch_sizes"] == [1, 3] and doc["settings"]["note"] == "load test"
    assert "## Batch" in (shared / "out" / "bench.md").read_text()


def test_cli_bench_without_batch_and_with_a_stem(tok_dir: Path) -> None:
    from tooldec.bench.measure import use_clock
    from tooldec.cli import app

    shared = tok_dir.parent.parent
    args = ["bench", "--engines", "tooldec", "--workloads", "rich", "--tokenizers", "tiny", "--repeats", "1",
            "--shared", str(shared), "--out", str(shared / "out2"), "--stem", "tiny", "--clock", "cpu",
            "--batch-sizes", ""]
    try:
        result = CliRunner().invoke(app, args)
    finally:
        use_clock("wall")
    assert result.exit_code == 0, result.output
    doc = json.loads((shared / "out2" / "tiny.json").read_text())
    assert doc["results"][0]["batch"] == [] and "batch_methods" not in doc
    assert doc["settings"]["clock"] == "cpu" and doc["results"][0]["mask_us_median"] > 0
    md = (shared / "out2" / "tiny.md").read_text()
    assert "## Batch" not in md and "CPU time" in md
    bad = CliRunner().invoke(app, [*args[:-2], "--batch-sizes", "0"])
    assert bad.exit_code != 0
    unknown = CliRunner().invoke(app, [*args[:-4], "--clock", "sundial"])
    assert unknown.exit_code != 0 and "sundial" in unknown.output


def test_ratios_are_peer_over_tooldec_and_skip_noise() -> None:
    base = {"workload": "w", "tokenizer": "t", "status": "ok", "compile_ms": 10.0, "rss_mb": 0.1}
    rows = report.add_ratios([base | {"engine": "tooldec"}, base | {"engine": "peer", "compile_ms": 25.0}])
    assert rows[1]["compile_ratio"] == 2.5
    assert rows[1]["rss_ratio"] is None


# --- batch measurement -------------------------------------------------------------------------------------------


def test_rows_start_spread_over_the_stream() -> None:
    stream = [Track(0, "a", (1, 2, 3)), Track(0, "a", (4, 5)), Track(1, "b", (6, 7, 8, 9, 10))]
    assert starts(stream, 1) == [(0, 0)]
    assert starts(stream, 4) == [(0, 0), (0, 2), (2, 0), (2, 2)]  # stream positions 0, 2, 5, 7 of 10
    assert len(set(starts(stream, 10))) == 10  # every position once
    assert check_steps(stream, 1, 200) == 11 and check_steps(stream, 4, 200) == 4 and check_steps(stream, 1, 5) == 5


def test_unpacked_reads_bit_t_of_word_t_over_32() -> None:
    mask = np.zeros((2, 2), dtype=np.int32)
    mask[0, 0], mask[1, 1] = 1 << 3, np.int32(-(2**31))  # token 3; token 63 (the sign bit of word 1)
    bits = unpacked(mask, 64)
    assert bits.shape == (2, 64)
    assert np.flatnonzero(bits[0]).tolist() == [3] and np.flatnonzero(bits[1]).tolist() == [63]


def test_rows_walk_the_calls_and_restart_after_eos(tok_dir: Path, vocab: Vocabulary) -> None:
    eos = min(vocab.eos_ids)
    items = prepare_calls(load_workload("funcqa", tok_dir), vocab, eos)
    engine = TooldecEngine(tok_dir, vocab, eos)
    driver = engine.batch(1)
    compiled = [engine.compile(item.case.tools) for item in items]
    stream = tracks(items)
    rows = Rows(driver, compiled, stream, 3)
    seen: list[list[int]] = [[], [], []]
    total = sum(len(t.tokens) for t in stream)
    for _ in range(total + 2):
        tokens = rows.tokens()
        assert all(driver.advance(rows.objs, tokens))
        for i, t in enumerate(tokens):
            seen[i].append(t)
        rows.moved()
    flat = [t for track in stream for t in track.tokens]
    start = starts(stream, 3)[1]
    offset = sum(len(t.tokens) for t in stream[: start[0]]) + start[1]
    assert seen[1][: total - offset] == flat[offset:]  # row 1 walks the stream from its start position
    assert seen[1][total - offset : total] == flat[:offset]  # and wraps round to the first call afresh
    assert seen[0][:total] == flat


def test_tooldec_batch_figures_agree_and_report(tok_dir: Path) -> None:
    workloads = [load_workload("rich", tok_dir), load_workload("funcqa", tok_dir)]
    batch = BatchSettings((1, 4, 9), steps=12)
    results = run(["tooldec"], workloads, {"tiny": tok_dir}, repeats=1, batch=batch)
    for r in results:
        assert [e["batch_size"] for e in r.batch] == [1, 4, 9]
        for e in r.batch:
            assert e["status"] == "ok", e
            assert e["steps"] == 12 and e["check_steps"] >= 1 and e["threads"] == 1
            assert 0 < e["fill_us_median"] <= e["step_us_median"] or e["fill_us_median"] <= e["step_us_p99"]
            assert e["advance_us_median"] > 0
    doc = report.document(results, {"repeats": 1, "batch_steps": 12, "batch_threads": 1})
    row = doc["results"][0]
    assert row["batch"][1]["step_median_ratio"] == 1.0
    assert set(doc["batch_methods"]) == {"tooldec"}
    md = report.markdown(doc)
    assert "## Batch" in md and "| rich | tiny | tooldec | 9 |" in md


def test_batch_ratios_are_peer_over_tooldec_at_the_same_batch_size() -> None:
    base = {"workload": "w", "tokenizer": "t", "status": "ok"}
    ours = base | {"engine": "tooldec", "batch": [{"batch_size": 1, "status": "ok", "step_us_median": 10.0},
                                                   {"batch_size": 8, "status": "ok", "step_us_median": 40.0}]}
    peer = base | {"engine": "peer", "batch": [{"batch_size": 8, "status": "ok", "step_us_median": 100.0},
                                               {"batch_size": 32, "status": "ok", "step_us_median": 1.0}]}
    rows = report.add_ratios([ours, peer])
    assert rows[1]["batch"][0]["step_median_ratio"] == 2.5
    assert rows[1]["batch"][1]["step_median_ratio"] is None


class _WideFill(TooldecBatch):
    """A batch path that allows every token (its masks differ from the single-row ones)."""

    def fill(self, rows: list, bitmask: np.ndarray) -> None:
        bitmask.fill(-1)


class _NoApply(TooldecBatch):
    """A batch path whose apply does nothing."""

    def apply(self, logits: object, bitmask: np.ndarray) -> None:
        pass


@pytest.mark.parametrize(("driver", "message"), [(_WideFill, "differs from the single-row mask"),
                                                 (_NoApply, "the apply left")])
def test_a_batch_path_that_disagrees_fails_the_check(
    driver: type[TooldecBatch], message: str, tok_dir: Path, vocab: Vocabulary
) -> None:
    eos = min(vocab.eos_ids)
    items = prepare_calls(load_workload("rich", tok_dir), vocab, eos)
    engine = TooldecEngine(tok_dir, vocab, eos)
    compiled = [engine.compile(item.case.tools) for item in items]
    with pytest.raises(BatchCheckFailed, match=message):
        check_batch(engine, driver(vocab.size, 1), compiled, tracks(items), 4, 10, LogitsSource())

    class Engine2(TooldecEngine):
        def batch(self, threads: int) -> TooldecBatch:
            return driver(self.vocab.size, threads)

    entries = run_batch(Engine2(tok_dir, vocab, eos), items, (2,), 5, 1, LogitsSource())
    assert entries[0]["status"] == "failed" and message in entries[0]["reason"]
    assert "step_us_median" not in entries[0]


def test_a_cell_that_fails_its_check_gets_failed_batch_entries(tok_dir: Path, vocab: Vocabulary) -> None:
    eos = min(vocab.eos_ids)
    items = prepare_calls(load_workload("rich", tok_dir), vocab, eos)
    result = run_cell(_Broken(tok_dir, vocab, eos), items, CellResult("broken", "rich", "tiny"), repeats=1,
                      batch=BatchSettings((1, 2), steps=3))
    assert [(e["batch_size"], e["status"]) for e in result.batch] == [(1, "failed"), (2, "failed")]


@pytest.fixture
def eager_torch() -> Iterator[None]:
    """The peers' torch.compile'd apply kernels run eagerly (same function; compiling takes ~10 s per shape).

    Through the config's own patch: monkeypatch's undo deleted the setting from torch's config module, so the
    next test found no `disable` at all (AttributeError, seen in a fresh CI environment)."""
    pytest.importorskip("torch")
    import torch._dynamo

    with torch._dynamo.config.patch(disable=True):
        yield


@pytest.mark.usefixtures("eager_torch")
@pytest.mark.parametrize("name", ["xgrammar", "llguidance", "outlines-core"])
def test_peer_batch_paths_agree_with_their_single_rows(name: str, tok_dir: Path, vocab: Vocabulary) -> None:
    cls: type[Engine] = ENGINES[name]
    if cls.missing():
        pytest.skip(cls.missing())
    eos = min(vocab.eos_ids)
    items = prepare_calls(load_workload("funcqa", tok_dir), vocab, eos)
    result = run_cell(cls(tok_dir, vocab, eos), items, CellResult(name, "funcqa", "tiny"), repeats=1,
                      batch=BatchSettings((1, 7), steps=10))
    assert result.status == "ok", result.reason
    for e in result.batch:
        assert e["status"] == "ok", e
        assert e["step_us_median"] is not None and e["fill_us_p99"] is not None


# --- context-free-grammar workloads ------------------------------------------------------------------------------

CFG_DATA = Path(__file__).parent / "data" / "cfg"


@pytest.fixture(scope="module")
def cfg_shared(tok_dir: Path) -> Path:
    """The tiny tokenizer's SHARED folder with the grammars of tests/data/cfg as data/cfg."""
    shared = tok_dir.parent.parent
    (shared / "data").mkdir(exist_ok=True)
    if not (shared / "data" / "cfg").exists():
        (shared / "data" / "cfg").symlink_to(CFG_DATA.resolve())
    return shared


def test_cfg_workloads_load_grammar_and_sample(cfg_shared: Path) -> None:
    from tooldec.bench.cfg import CFG_WORKLOADS, GrammarCase

    for name, stem in CFG_WORKLOADS.items():
        workload = load_workload(name, cfg_shared)
        (case,) = workload.cases
        assert isinstance(case, GrammarCase) and workload.note
        assert case.grammar == (CFG_DATA / f"{stem}.lark").read_text()
        assert case.sample == (CFG_DATA / f"{stem}.sample.txt").read_text()


def test_cfg_workload_without_shared_data_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"json\.lark in .*data/cfg"):
        load_workload("cfg-json", tmp_path)


def test_cfg_sample_is_forced_then_eos(cfg_shared: Path, vocab: Vocabulary) -> None:
    (item,) = prepare_calls(load_workload("cfg-arith", cfg_shared), vocab, 7)
    (call,) = item.calls
    assert call[-1] == 7 and item.unknown == ()
    assert b"".join(vocab.token_bytes[t] or b"" for t in call[:-1]) == (CFG_DATA / "arith_leftrec.sample.txt").read_bytes()


def test_cfg_cells_peers_time_tooldec_waits_outlines_fails(cfg_shared: Path, tok_dir: Path) -> None:
    """Peers pass the check and report figures (batch too); outlines-core fails with its reason; tooldec runs."""
    names = [n for n in ("llguidance", "xgrammar", "outlines-core", "tooldec") if ENGINES[n].missing() is None]
    workloads = [load_workload("cfg-arith", cfg_shared), load_workload("cfg-nested", cfg_shared)]
    results = run(names, workloads, {"tiny": tok_dir}, repeats=1, batch=BatchSettings((1, 3), 2))
    by = {(r.engine, r.workload): r for r in results}
    for name in {"llguidance", "xgrammar"} & set(names):
        for w in ("cfg-arith", "cfg-nested"):
            row = by[(name, w)]
            assert row.status == "ok", row.reason
            assert row.compile_ms is not None and row.mask_us_median is not None and row.mask_us_p99 is not None
            assert [(e["batch_size"], e["status"]) for e in row.batch] == [(1, "ok"), (3, "ok")], row.batch
    if "outlines-core" in names:
        row = by[("outlines-core", "cfg-arith")]
        assert row.status == "failed" and "no context-free grammar engine" in row.reason
    row = by[("tooldec", "cfg-arith")]
    assert (row.status, row.reason) == ("ok", "")
    doc = report.document(results, {"repeats": 1})
    assert "| cfg-nested | tiny |" in report.markdown(doc)


def test_tool_and_grammar_workloads_run_side_by_side(cfg_shared: Path, tok_dir: Path) -> None:
    """A CFG workload in the same run does not change how tooldec runs the tool-call workloads."""
    workloads = [load_workload("rich", cfg_shared), load_workload("cfg-nested", cfg_shared)]
    results = run(["tooldec"], workloads, {"tiny": tok_dir}, repeats=1)
    assert results[0].status == "ok"
    assert results[1].status == "ok"


class _PermissiveGrammar:
    """A session that allows every token and accepts it: what check_sample must catch."""

    mask = np.full((1, 4), -1, dtype=np.int32)

    def fill_mask(self) -> None:
        """Nothing to compute."""

    def allowed(self, token_id: int) -> bool:
        return True

    def advance(self, token_id: int) -> bool:
        return True


def test_check_sample_refuses_an_engine_that_allows_everything(cfg_shared: Path, vocab: Vocabulary) -> None:
    from tooldec.bench.runner import check_sample

    class Permissive(TooldecEngine):
        name = "permissive"

        def compile_grammar(self, grammar: str) -> object:
            return grammar

        def start(self, compiled: object) -> _PermissiveGrammar:  # type: ignore[override]
            return _PermissiveGrammar()

    (item,) = prepare_calls(load_workload("cfg-json", cfg_shared), vocab, min(vocab.eos_ids))
    engine = Permissive(cfg_shared / "tokenizers" / "tiny", vocab, min(vocab.eos_ids))
    with pytest.raises(CheckFailed, match="allows every token"):
        check_sample(engine, item)
