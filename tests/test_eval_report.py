"""Reports: results.json, Markdown table, plots, comparison over runs, and resuming a partial run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tooldec.eval.report import (
    KAMEL_PLOT,
    MODES_PLOT,
    RESULTS_FILE,
    TABLE_FILE,
    ResumeError,
    environment,
    environments_with,
    kamel_curve,
    load_results,
    markdown_table,
    modes_plot_name,
    pending,
    plot_modes,
    result_rows,
    resume_records,
    summarize,
    write_comparison,
    write_results,
)
from tooldec.grammar.calls import ParsedCall


def _records(n: int, correct_every: int = 2) -> list[dict[str, Any]]:
    kinds = [None, "format", None, "argument"]
    return [
        {
            "id": f"item-{i}",
            "correct": i % correct_every == 0,
            "syntax_error": kinds[i % 4],
            "seconds": 0.5,
            "generated_tokens": 10 + i,
            "tokens_per_tool": 8,
        }
        for i in range(n)
    ]


def test_summary_per_decoding_mode() -> None:
    records = _records(4) + [{"id": "x", "decoding": "free", "correct": True, "syntax_error": "name"}]
    summary = summarize(records, "tooldec")
    assert set(summary) == {"tooldec", "free"}
    ours = summary["tooldec"]
    assert ours["n"] == 4 and ours["accuracy"] == 0.5
    assert ours["syntax_errors"] == {"format": 0.25, "name": 0.0, "argument": 0.25, "any": 0.5}
    assert ours["seconds_per_item"] == 0.5 and ours["generated_tokens_per_item"] == 11.5
    assert summary["free"]["seconds_per_item"] is None


def test_write_results(tmp_path: Path) -> None:
    config = {"benchmark": "funcqa-oh", "model": "tiny", "decoding": "tooldec", "limit": 4}
    records = [{**r, "call": ParsedCall("add", {"a": 1}), "steps": ("GET /a",)} for r in _records(4)]
    doc = write_results(
        tmp_path, config, records, {"data/x.json": "ab" * 32}, notes=["responses are simulated"]
    )
    assert {p.name for p in tmp_path.iterdir()} == {RESULTS_FILE, TABLE_FILE, MODES_PLOT}
    saved = load_results(tmp_path)
    assert saved == json.loads(json.dumps(saved))
    assert saved["complete"] is True and saved["data"] == {"data/x.json": "ab" * 32}
    assert saved["model"] == "tiny" and saved["config"]["limit"] == 4
    # a call record is the ParsedCall's fields; `input` (a custom tool's text input) is null for a function call
    assert saved["records"][0]["call"] == {"name": "add", "arguments": {"a": 1}, "positional": [], "input": None}
    assert saved["summary"] == json.loads(json.dumps(doc["summary"]))
    table = (tmp_path / TABLE_FILE).read_text()
    assert (
        "| funcqa-oh | tiny | tooldec |  | 4 | 50.0% | 50.0% | 25.0% | 0.0% | 25.0% | 8.0 | 0.50 | 11.5 |"
        in table
    )
    assert "- responses are simulated" in table
    assert (tmp_path / MODES_PLOT).read_bytes()[:4] == b"\x89PNG"


def test_partial_results_and_resume(tmp_path: Path) -> None:
    config = {"benchmark": "kamel", "model": "tiny", "decoding": "free", "tools": 30, "limit": 2}
    write_results(tmp_path, config, _records(2), {}, partial=True)
    assert not (tmp_path / TABLE_FILE).exists()
    assert load_results(tmp_path / RESULTS_FILE)["complete"] is False
    grown = {**config, "limit": 4}
    done = resume_records(tmp_path, grown)
    assert [r["id"] for r in done] == ["item-0", "item-1"]
    assert pending(["item-0", "item-1", "item-2", "item-3"], done) == ["item-2", "item-3"]
    with pytest.raises(ResumeError, match="tools"):
        resume_records(tmp_path, {**config, "tools": 60})
    assert resume_records(tmp_path / "elsewhere", config) == []


def test_environments_of_a_resumed_run_accumulate(tmp_path: Path) -> None:
    """A run keeps what wrote its records: a resume in the same environment adds nothing, a resume in another
    one (here another torch) adds it, and the current one names the packages that decide a generation."""
    config = {"benchmark": "kamel", "model": "tiny", "decoding": "free", "tools": 30, "limit": 2}
    now = environment()
    assert {"python", "tooldec", "torch", "transformers", "tokenizers", "numpy", "revision"} <= set(now)
    assert environments_with(tmp_path, now) == [now]
    write_results(tmp_path, config, _records(2), {}, partial=True, environments=[now])
    assert environments_with(tmp_path, now) == [now]
    other = {**now, "torch": "0.0.0"}
    assert environments_with(tmp_path, other) == [now, other]
    assert load_results(tmp_path / RESULTS_FILE)["environments"] == [now]


def test_comparison_over_runs_with_kamel_plot(tmp_path: Path) -> None:
    paths = []
    for mode in ("tooldec", "free", "fuzzy"):
        for k in (30, 234):
            out = tmp_path / f"{mode}-{k}"
            config = {"benchmark": "kamel", "model": "tiny", "decoding": mode, "tools": k}
            write_results(out, config, _records(4, 1 if mode == "tooldec" else 2), {}, notes=["note"])
            paths.append(out / RESULTS_FILE)
    rows = write_comparison(paths, tmp_path / "all")
    assert len(rows) == 6
    assert [(r["decoding"], r["tools"]) for r in rows[:2]] == [("free", 30), ("fuzzy", 30)]
    assert (tmp_path / "all" / KAMEL_PLOT).read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "all" / TABLE_FILE).read_text().count("| kamel |") == 6


def test_kamel_curve_joins_finished_runs_only(tmp_path: Path) -> None:
    docs = []
    for k, partial in ((30, False), (60, False), (100, True)):
        out = tmp_path / f"tooldec-{k}"
        config = {"benchmark": "kamel", "model": "tiny", "decoding": "tooldec", "tools": k}
        docs.append(write_results(out, config, _records(4), {}, partial=partial))
    rows = result_rows(docs)
    assert [r["complete"] for r in rows] == [True, True, False]
    assert [r["tools"] for r in kamel_curve(rows)] == [30, 60]


def test_comparison_over_models_plots_each_and_labels_every_mode(tmp_path: Path) -> None:
    """A mode whose first benchmark is missing still gets its legend entry; each model gets its own plot."""
    paths = []
    runs = [("kamel", "a", "tooldec"), ("funcqa-oh", "a", "free"), ("funcqa-oh", "org/b", "tooldec")]
    for bench, model, mode in runs:
        out = tmp_path / f"{bench}-{model.replace('/', '_')}-{mode}"
        write_results(out, {"benchmark": bench, "model": model, "decoding": mode}, _records(3, 1), {})
        paths.append(out / RESULTS_FILE)
    rows = write_comparison(paths, tmp_path / "all")
    assert {r["model"] for r in rows} == {"a", "org/b"}
    for model in ("a", "org/b"):
        assert (tmp_path / "all" / modes_plot_name(model)).read_bytes()[:4] == b"\x89PNG"
    assert modes_plot_name("org/b") == "accuracy_errors-b.png"
    import matplotlib.pyplot as plt

    captured = []
    original = plt.Figure.savefig

    def spy(fig, *args, **kwargs):  # type: ignore[no-untyped-def]
        captured.append([t.get_text() for t in fig.axes[0].get_legend().get_texts()])
        return original(fig, *args, **kwargs)

    plt.Figure.savefig = spy  # type: ignore[method-assign]
    try:
        plot_modes([r for r in rows if r["model"] == "a"], tmp_path / "a.png")
    finally:
        plt.Figure.savefig = original  # type: ignore[method-assign]
    assert sorted(captured[0]) == ["free", "tooldec"]


def test_rows_mark_forced_calls_formats_and_compressed_descriptions() -> None:
    docs = [
        {"config": {"benchmark": "bfcl-simple", "model": "m", "decoding": "free", "format": "hermes"},
         "summary": {"free": {}}},
        {"config": {"benchmark": "bfcl-simple", "model": "m", "decoding": "tooldec", "format": "hermes-lines"},
         "summary": {"tooldec": {}}},
        {"config": {"benchmark": "bfcl-simple", "model": "m", "decoding": "free", "tool_choice": "required"},
         "summary": {"free": {}}},
        {"config": {"benchmark": "restbench-tmdb", "model": "m", "decoding": "free", "compressed": "short.json"},
         "summary": {"free": {}}},
    ]
    names = [row["benchmark"] for row in result_rows(docs)]
    assert names == ["bfcl-simple", "bfcl-simple (hermes-lines)", "bfcl-simple (required)", "restbench-tmdb (compressed)"]


def test_markdown_table_of_no_rows() -> None:
    assert markdown_table([]).count("\n") == 2


def test_guidance_is_summarised_on_correct_and_wrong_items() -> None:
    records = _records(4)  # items 0 and 2 are correct
    for i, r in enumerate(records):
        r["guidance"] = {"guided_steps": 3, "removed_sum": 0.1 * (i + 1), "removed_max": 0.05 * (i + 1),
                         "overrides": i, "where": []}
    records.append({"id": "free", "decoding": "free", "correct": False})
    summary = summarize(records, "tooldec")
    assert "guidance" not in summary["free"]
    g = summary["tooldec"]["guidance"]
    assert g["items_correct"] == 2 and g["items_wrong"] == 2
    assert g["removed_sum_correct"] == pytest.approx(0.2) and g["removed_sum_wrong"] == pytest.approx(0.3)
    assert g["removed_max_wrong"] == pytest.approx(0.15) and g["overrides_per_item"] == 1.5
    table = markdown_table(result_rows([{"config": {"benchmark": "kamel", "tools": 30}, "model": "m",
                                         "summary": summary}]))
    assert "| kamel | m | 30 | 2 / 2 | 0.200 | 0.300 | 0.100 | 0.150 | 1.50 |" in table
