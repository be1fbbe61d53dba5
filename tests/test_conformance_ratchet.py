"""The MaskBench conformance ratchet in CI (issue 14): a deterministic tenth of ../shared/data/maskbench is checked
as `tooldec check-schemas` checks it and compared with the committed baseline, tests/conformance/maskbench_llama3.json.

Marked slow; skipped when ../shared (or $TOOLDEC_SHARED) is absent. The full run is a command (about 10 minutes
of CPU): `python tests/conformance/ratchet.py`; an improvement becomes the baseline with `--update`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tooldec.conformance import FileResult, regressions

_spec = importlib.util.spec_from_file_location("ratchet", Path(__file__).with_name("conformance") / "ratchet.py")
assert _spec is not None and _spec.loader is not None
ratchet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ratchet)

@pytest.mark.slow
@pytest.mark.skipif(not (ratchet.SHARED / "data" / "maskbench").exists(), reason="../shared is not present")
def test_no_maskbench_file_regresses_from_the_baseline() -> None:
    """Every sampled file does at least as well as in the baseline, and no invalid instance is accepted."""
    files = ratchet.maskbench_files(sample=True)
    baseline = ratchet.load_baseline()
    assert len(files) >= 300 and all(f.name in baseline for f in files)
    # a generous time limit: a file that compiled in the baseline's 10 s must not fail on a busy machine
    results = ratchet.run(files, ratchet.SHARED / "tokenizers" / ratchet.TOKENIZER, timeout_s=3 * ratchet.TIMEOUT_S)
    worse = regressions(results, baseline)
    assert not worse, "\n".join(
        [*worse, "If this is intended, rewrite the baseline: python tests/conformance/ratchet.py --update"]
    )


def test_the_ratchet_catches_each_kind_of_regression() -> None:
    """A crash, a file that stopped compiling, fewer valid accepted and any invalid accepted are regressions;
    a file that does better is not."""
    base = {"a.json": {"status": "compiled", "reason": "", "valid_accepted": 2, "valid_total": 2, "invalid_accepted": 0}}
    base |= {n: base["a.json"] for n in ("b.json", "c.json", "d.json", "e.json")}
    base["e.json"] = {**base["a.json"], "status": "unsupported", "reason": "timeout"}
    now = [
        FileResult("a.json", "crashed", reason="Traceback (most recent call last):\nKeyError: 'x'"),
        FileResult("b.json", "unsupported", reason="timeout: compile over 10s"),
        FileResult("c.json", "compiled", valid_total=2, valid_accepted=1),
        FileResult("d.json", "compiled", valid_total=2, valid_accepted=2, invalid_total=3, invalid_rejected=2),
        FileResult("e.json", "compiled", valid_total=2, valid_accepted=2),
    ]
    worse = regressions(now, base)
    assert [w.split(":")[0] for w in worse] == ["a.json", "b.json", "c.json", "d.json"]
    assert "KeyError" in worse[0] and "1 invalid" in worse[3]


def test_a_partial_update_rewrites_only_its_files_and_moves_the_summary(tmp_path: Path) -> None:
    """--files with --update: the named files' entries change, the others stay, and the summary moves by the
    difference (a file that now compiles brings its invalid instances, counted from the file itself)."""
    bench = tmp_path / "data" / "maskbench"
    bench.mkdir(parents=True)
    tests = [{"valid": True, "data": 1}, {"valid": False, "data": "x"}, {"valid": False, "data": None}]
    for name in ("a.json", "b.json", "c.json"):
        (bench / name).write_text(json.dumps({"schema": {}, "tests": tests}))
    entry = {"status": "compiled", "reason": "", "valid_accepted": 0, "valid_total": 1, "invalid_accepted": 0}
    entries = {"a.json": entry, "b.json": {**entry, "status": "unsupported", "reason": "timeout", "valid_total": 0},
               "c.json": entry}
    summary = {"files": 3, "compiled": 2, "unsupported": 1, "crashed": 0, "valid_total": 2, "valid_accepted": 0,
               "invalid_total": 4, "invalid_rejected": 4, "compile_ms_median": 5.0, "compile_ms_p95": 9.0}
    baseline = tmp_path / "baseline.json"
    ratchet._write({"date": "x", "summary": summary}, entries, baseline)
    now = [FileResult(n, "compiled", valid_total=1, valid_accepted=1, invalid_total=2, invalid_rejected=2)
           for n in ("a.json", "b.json")]
    moved = ratchet.update_entries(now, tmp_path, baseline)
    assert moved == {**summary, "compiled": 3, "unsupported": 0, "valid_total": 3, "valid_accepted": 2,
                     "invalid_total": 6, "invalid_rejected": 6}
    written = json.loads(baseline.read_text())
    assert written["summary"] == moved and written["files"]["c.json"] == entry
    assert written["files"]["b.json"] == {**entry, "valid_accepted": 1}
    assert written["partial_updates"][0]["files"] == ["a.json", "b.json"]
