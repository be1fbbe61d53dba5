"""The maskbench workload on a tiny synthetic sample (no shared data): the seeded sample, the worker, the counts
and the report's rows, a timeout that kills the worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from tooldec.bench.engines.tooldec_engine import TooldecEngine
from tooldec.bench.maskbench import Worker, load_file, run_maskbench, sample_files, spellings, walk_file
from tooldec.grammar.canonical import CanonicalWriter
from tooldec.vocab import Vocabulary

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"], "additionalProperties": False}
FILES = {
    "person.json": {"schema": PERSON, "tests": [
        {"valid": True, "data": {"name": "Ada", "age": 36}},
        {"valid": True, "data": {"age": 7, "name": "Bo"}},
        {"valid": False, "data": {"name": "Ada", "age": "old"}},
        {"valid": False, "data": {"age": 3}},
    ]},
    "color.json": {"schema": {"enum": ["red", "green"]}, "tests": [
        {"valid": True, "data": "red"}, {"valid": False, "data": "blue"},
    ]},
    "empty.json": {"schema": {"allOf": [{"type": "string"}, {"type": "integer"}]}, "tests": [
        {"valid": False, "data": 3},
    ]},
    "bad.json": {"schema": {"type": "nonsense"}, "tests": [{"valid": True, "data": 1}]},
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, bytelevel_tokenizer: Tokenizer) -> Path:
    """A SHARED folder with the byte-level fixture as tokenizers/tiny and the files above as data/maskbench."""
    root = tmp_path_factory.mktemp("shared")
    (root / "tokenizers" / "tiny").mkdir(parents=True)
    bytelevel_tokenizer.save(str(root / "tokenizers" / "tiny" / "tokenizer.json"))
    folder = root / "data" / "maskbench"
    folder.mkdir(parents=True)
    for name, doc in FILES.items():
        (folder / name).write_text(json.dumps(doc))
    return root


def test_sample_is_seeded_nested_and_blind_to_listing(shared: Path) -> None:
    folder = shared / "data" / "maskbench"
    two, three = sample_files(folder, 2), sample_files(folder, 3)
    assert two == sample_files(folder, 2) and set(two) < set(three)
    assert [p.name for p in sample_files(folder, 0)] == sorted(FILES)
    assert sample_files(folder, 2, seed="other") != two or sample_files(folder, 3, seed="other") != three
    with pytest.raises(FileNotFoundError, match="maskbench"):
        sample_files(shared, 2)


def test_an_instance_is_accepted_in_either_spelling(shared: Path) -> None:
    writer = CanonicalWriter(PERSON)
    canonical, own = spellings(writer, {"age": 7, "name": "Bo"})
    assert (canonical, own) == ('{"name": "Bo", "age": 7}', '{"age": 7, "name": "Bo"}')
    assert spellings(writer, {"name": "Bo"}) == ['{"name": "Bo"}'] and spellings(writer, float("nan")) == []
    tok = shared / "tokenizers" / "tiny"
    vocab = Vocabulary.from_file(tok)
    eos = min(vocab.eos_ids)
    engine = TooldecEngine(tok, vocab, eos)
    first, second = ((*vocab.encode(t), eos) for t in (own, canonical))
    walked = walk_file(engine, engine.compile_schema(PERSON), [(True, (first, second)), (True, (first,)), (False, ())])
    assert (walked["valid_accepted"], walked["valid_total"], walked["invalid_rejected"]) == (1, 2, 1)
    (wrong,) = walked["wrong"]
    assert wrong.startswith("valid #1 rejected at token ") and wrong.endswith(f" of {len(first)}")
    assert len(walked["first_mask_us"]) == 3  # both walks of #0, the one of #1


def test_cli_table_counts_are_consistent(shared: Path, tmp_path: Path) -> None:
    from tooldec.cli import app

    args = ["bench", "--workloads", "maskbench", "--engines", "tooldec", "--tokenizers", "tiny", "--shared",
            str(shared), "--maskbench-files", "0", "--clock", "cpu", "--out", str(tmp_path), "--stem", "mb", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "mb.json").read_text())
    (row,) = doc["results"]
    assert row["engine"] == "tooldec" and row["status"] == "ok"
    assert row["files"] == 4 == row["compiled"] + row["failed"] + row["timeouts"] + row["crashed"]
    assert (row["compiled"], row["failed"], row["empty"]) == (3, 1, 1)
    assert (row["valid_accepted"], row["valid_total"]) == (3, 3)
    assert (row["invalid_rejected"], row["invalid_total"]) == (4, 4)
    assert row["wrong_verdicts"] == 0 and row["steps"] > 0
    assert row["compile_ms_median"] > 0 and row["mask_us_p99"] >= row["mask_us_median"] > 0
    assert doc["sample"] == sorted(FILES) and doc["common"]["files"] == 3
    statuses = {f["file"]: f["status"] for f in doc["files"]["tooldec"]}
    assert statuses == {"bad.json": "failed", "color.json": "compiled", "empty.json": "compiled",
                        "person.json": "compiled"}
    md = (tmp_path / "mb.md").read_text()
    assert "| tooldec | 4 | 3 | 1 | 0 | 0 |" in md and "3 / 3 (100.0%)" in md and "4 / 4 (100.0%)" in md
    assert "SchemaError" in md


def test_compile_timeout_kills_the_worker_and_counts(shared: Path, tmp_path: Path) -> None:
    # a DFA of 2^18 states: far past a 0.05 s limit (~0.4 s at {16} on gpt2)
    slow = {"schema": {"type": "string", "pattern": "^(a|b)*a(a|b){18}$"}, "tests": [{"valid": True, "data": "a"}]}
    (tmp_path / "slow.json").write_text(json.dumps(slow))
    tok = shared / "tokenizers" / "tiny"
    vocab = Vocabulary.from_file(tok)
    eos = min(vocab.eos_ids)
    files = [load_file(tmp_path / "slow.json", vocab, eos), load_file(tmp_path / "slow.json", vocab, eos),
             load_file(shared / "data" / "maskbench" / "color.json", vocab, eos)]
    (run,) = run_maskbench(["tooldec"], files, tok, eos, compile_timeout=0.05, clock="cpu")
    assert run.status == "ok"
    assert [o.status for o in run.outcomes] == ["timeout", "timeout", "compiled"]
    assert run.outcomes[0].reason == "compile over 0.05 s" and run.outcomes[2].valid_accepted == 1


def test_a_worker_dead_between_files_is_replaced(shared: Path) -> None:
    tok = shared / "tokenizers" / "tiny"
    vocab = Vocabulary.from_file(tok)
    eos = min(vocab.eos_ids)
    color = load_file(shared / "data" / "maskbench" / "color.json", vocab, eos)
    worker = Worker("tooldec", tok, eos, "wall")
    try:
        assert worker.run(color, 10.0, 10.0).status == "compiled"
        worker.process.kill()
        worker.process.join()
        again = worker.run(color, 10.0, 10.0)
        assert (again.status, again.valid_accepted, again.invalid_rejected) == ("compiled", 1, 1)
    finally:
        worker.close()
