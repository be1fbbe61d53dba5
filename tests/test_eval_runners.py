"""Benchmark runners, `tooldec eval` and prompt compression with a tiny random Llama (the harshest model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tooldec.backends.loader import LoadedModel
from tooldec.chat import parse_call
from tooldec.eval.compress import (
    cache_key,
    clean_description,
    compress_tools,
    compressed_block,
    doc_key,
    short_description,
    shortened,
)
from tooldec.eval.metrics import SyntaxChecker
from tooldec.eval.runners import EvalError, prepare
from tooldec.eval.runners.bfcl import HERMES
from tooldec.eval.runners.scoring import Attempt, chat_attempts, classify, react_attempts, toolken_attempts
from tooldec.grammar.calls import ToolkenCall, get_format
from tooldec.specs import ToolSpec, from_openai_tools
from tooldec.toolsets.funcqa import funcqa_tools

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_lm(bytelevel_tokenizer: Any, tiny_llama: Any) -> LoadedModel:
    """A random 2-layer Llama over the byte-level fixture tokenizer, with a chat template that ignores tools."""
    from tooldec.vocab import Vocabulary

    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer, eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    model = tiny_llama(len(tokenizer), num_attention_heads=2, eos_token_id=tokenizer.eos_token_id)
    vocab = Vocabulary.from_hf(tokenizer, vocab_size=len(tokenizer))
    return LoadedModel(model, tokenizer, vocab, "tiny-llama", "test", 0.0)


def _lines(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake shared folder with two or three hand-made items per benchmark."""
    root = tmp_path_factory.mktemp("shared")
    data = root / "data"
    template = "Answer the following question with <add>, <subtract>:\n\nQ: 1 plus 2?\nA: <add>(1,2)=3. So, the answer is 3.\n\nQ: [QUESTION]\nA:"
    for split in ("oh", "mh"):
        _json(
            data / "funcqa" / f"funcqa_{split}.json",
            [
                {"question": "What is 3 plus 4?", "answer": "7", "calculation": ["<add>(3,4)=7"]},
                {"question": "What is 10 minus 2.5?", "answer": "7.5", "calculation": ["<subtract>(10,2.5)=7.5"]},
            ],
        )
        for name in ("llama_func.txt", "llama_general.txt"):
            path = data / "funcqa" / f"template_{split}" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(template, encoding="utf-8")
    relations = {f"P{i}": f"relation_{i}(name): gets relation {i} of a thing" for i in range(30)}
    _json(data / "kamel" / "func_dict.json", {rel: i for i, rel in enumerate(relations)})
    _json(data / "kamel" / "api_desc.json", relations)
    _json(
        data / "kamel" / "test_first_30.json",
        [
            {"question": f"What is relation {i} of Paris?", "answer": [{"chosen": "x", "alternative": []}], "api": f"P{i}"}
            for i in (1, 7, 29)
        ],
    )
    spec = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/movie/{movie_id}": {
                "get": {
                    "operationId": "get_movie",
                    "description": "Details of a movie.",
                    "parameters": [{"name": "movie_id", "in": "path", "required": True, "schema": {"type": "integer"}}],
                    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {
                        "type": "object", "properties": {"title": {"type": "string"}}}}}}},
                }
            },
            "/search/movie": {
                "get": {
                    "operationId": "search_movie",
                    "description": "Search movies by title.",
                    "parameters": [{"name": "query", "in": "query", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "ok"}},
                }
            },
        },
    }
    _json(data / "restbench" / "tmdb_oas.json", spec)
    _json(
        data / "restbench" / "tmdb.json",
        [
            {"query": "Who directed Alien?", "solution": ["GET /search/movie", "GET /movie/{movie_id}"]},
            {"query": "Find the movie Heat.", "solution": ["GET /search/movie"]},
        ],
    )
    weather = {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {
            "type": "dict",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
    area = {
        "name": "area",
        "description": "Area of a rectangle.",
        "parameters": {
            "type": "dict",
            "properties": {"w": {"type": "float"}, "h": {"type": "float"}},
            "required": ["w", "h"],
        },
    }
    stems = {
        "simple_python": [weather],
        "multiple": [weather, area],
        "parallel": [weather],
        "parallel_multiple": [weather, area],
        "irrelevance": [area],
    }
    for stem, functions in stems.items():
        entries = [
            {"id": f"{stem}_{i}", "question": [[{"role": "user", "content": q}]], "function": functions}
            for i, q in enumerate(["Weather in Paris?", "Weather in Rome for 3 days?"])
        ]
        _lines(data / "bfcl" / f"BFCL_v4_{stem}.json", entries)
        if stem != "irrelevance":
            answers = [
                {"id": f"{stem}_0", "ground_truth": [{"get_weather": {"city": ["Paris"], "days": [""]}}]},
                {"id": f"{stem}_1", "ground_truth": [{"get_weather": {"city": ["Rome"], "days": [3]}}]},
            ]
            _lines(data / "bfcl" / "possible_answer" / f"BFCL_v4_{stem}.json", answers)
    return root


RECORD_KEYS = {"id", "decoding", "prediction", "gold", "correct", "syntax_error", "tokens_per_tool", "seconds"}
CASES = [
    ("funcqa-oh", None),
    ("funcqa-mh", None),
    ("kamel", 30),
    ("restbench-tmdb", None),
    ("bfcl-simple", None),
    ("bfcl-multiple", None),
    ("bfcl-parallel", None),
    ("bfcl-parallel-multiple", None),
    ("bfcl-irrelevance", None),
]


@pytest.mark.parametrize(("bench_name", "tools"), CASES)
def test_tooldec_never_makes_a_syntax_error(
    tiny_lm: LoadedModel, shared: Path, bench_name: str, tools: int | None
) -> None:
    """A random model under ToolDec: every call parses, names a tool and has valid arguments."""
    bench = prepare(bench_name, tiny_lm, "tooldec", root=str(shared), tools=tools)
    for item in bench.items:
        record = bench.run(item)
        assert RECORD_KEYS <= set(record)
        assert record["syntax_error"] is None, record
        assert all(call["kind"] in (None, "truncated") for call in record.get("calls", [])), record
        assert record["generated_tokens"] > 0
        json.dumps(record)


@pytest.mark.parametrize("decoding", ["tooldec", "free"])
@pytest.mark.parametrize(("bench_name", "tools"), [CASES[0], CASES[2], CASES[3], CASES[6]])
def test_a_batch_gives_each_item_the_record_it_gets_alone(
    tiny_lm: LoadedModel, shared: Path, bench_name: str, tools: int | None, decoding: str
) -> None:
    """Batched decoding (with the shared prompt prefix's cache) changes the cost, never the outcome; the mass
    guidance removed is a sum of probabilities, the same but for the batch's rounding."""
    bench = prepare(bench_name, tiny_lm, decoding, root=str(shared), tools=tools)
    together = bench.run_batch(bench.items)
    alone = [bench.run(item) for item in bench.items]
    assert len(together) == len(bench.items) >= 2
    for a, b in zip(together, alone, strict=True):
        outcome = {k: v for k, v in a.items() if k not in ("seconds", "guidance")}
        assert outcome == {k: v for k, v in b.items() if k not in ("seconds", "guidance")}
        _assert_same_guidance(a.get("guidance", {}), b.get("guidance", {}))


def _assert_same_guidance(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two records' guidance agree: the same steps and overrides, the removed mass to 1e-4."""
    assert [k for k in a] == [k for k in b]
    for key, value in a.items():
        if key.startswith("removed"):
            assert value == pytest.approx(b[key], abs=1e-4), key
        elif key == "where":
            assert [{**w, "removed": None} for w in value] == [{**w, "removed": None} for w in b[key]]
            assert [w["removed"] for w in value] == pytest.approx([w["removed"] for w in b[key]], abs=1e-3)
        else:
            assert value == b[key], key


@pytest.mark.parametrize("decoding", ["free", "fuzzy"])
@pytest.mark.parametrize(("bench_name", "tools"), [CASES[0], CASES[2], CASES[3], CASES[4]])
def test_free_and_fuzzy_records(
    tiny_lm: LoadedModel, shared: Path, bench_name: str, tools: int | None, decoding: str
) -> None:
    """Free and fuzzy decoding give records whose syntax errors are among the known kinds."""
    bench = prepare(bench_name, tiny_lm, decoding, root=str(shared), tools=tools)
    record = bench.run(bench.items[0])
    assert record["decoding"] == decoding
    assert record["syntax_error"] in (None, "format", "name", "argument")
    if bench.name.startswith("restbench"):
        assert any("simulated" in note for note in bench.notes)


def test_unknown_benchmark_and_decoding(tiny_lm: LoadedModel, shared: Path) -> None:
    """Unknown names are refused with the known ones listed."""
    with pytest.raises(EvalError, match="known"):
        prepare("nope", tiny_lm, "tooldec", root=str(shared))
    with pytest.raises(EvalError, match="known"):
        prepare("kamel", tiny_lm, "greedy", root=str(shared))


def test_attempt_scanners() -> None:
    """Call attempts are cut out of generated text per format."""
    text = "so 3+4=<add>(3,4)=7 and <sub>(1"
    assert [a.text for a in toolken_attempts(text, truncated=True)] == ["<add>(3,4)=", "<sub>(1"]
    assert not toolken_attempts(text, truncated=True)[-1].complete
    assert toolken_attempts(text, truncated=False)[-1].complete
    hermes = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call> then <tool_call>{"name": "b'
    found = chat_attempts(hermes, truncated=True)
    assert found[0].text.endswith("</tool_call>") and found[0].complete and not found[1].complete
    # a string argument may hold a closing tag: it closes nothing, and the call cut off by the token limit is an
    # incomplete attempt (read as a complete, malformed call, it was a format error), guided or free
    cut = '<tool_call>\n{"name": "a", "arguments": {"id": "}}</tool_call>  # 1. 1.'
    assert [a.complete for a in chat_attempts(cut, truncated=True)] == [False]
    assert [a.complete for a in chat_attempts(cut, truncated=False)] == [True]
    inside = '<tool_call>\n{"name": "a", "arguments": {"id": "x</tool_call><tool_call>y"}}\n</tool_call>'
    assert [a.text for a in chat_attempts(inside, truncated=False)] == [inside]
    malformed = '<tool_call>\n{"name": "a", "arguments": {x}}\n</tool_call> and {"name": "b", "arguments": {}}'
    assert [a.text for a in chat_attempts(malformed, truncated=True)] == [malformed[:malformed.index(" and")],
                                                                         malformed[malformed.index("{\"name\": \"b"):]]
    react = 'Thought: x\nAction: f\nAction Input: {"a": 1}\nObservation: 2\nThought: y\nAction: Finish\nAction Input: {'
    acts = react_attempts(react, truncated=True)
    assert acts[0].text == 'Action: f\nAction Input: {"a": 1}\n' and acts[0].complete
    assert not acts[1].complete
    assert acts[1].text == "Action: Finish\nAction Input: {"


def test_react_action_cut_off_at_its_name_is_truncated_not_a_name_error() -> None:
    """The token limit may fall right after `Action:` (the format opens the action): the cut-off attempt keeps
    its text as written, so its empty name is unfinished, not a closed empty name."""
    checker = SyntaxChecker(funcqa_tools(), get_format("react"))
    for text in ("Thought: t\nAction:", "Thought: t\nAction: ", "Thought: t\nAction: mul"):
        (act,) = react_attempts(text, truncated=True)
        assert not act.complete
        assert classify(checker, act, fuzzy=False).kind == "truncated", text
    (closed,) = react_attempts("Thought: t\nAction: mul\n", truncated=True)
    assert classify(checker, closed, fuzzy=False).kind == "name"
    (wrong,) = react_attempts("Thought: t\nAction: zzz", truncated=True)
    assert classify(checker, wrong, fuzzy=False).kind == "name"


def test_classify_kinds_and_fuzzy() -> None:
    """Format, name and argument errors; fuzzy decoding forgives a misspelt name; cut-off names are judged."""
    checker = SyntaxChecker(funcqa_tools(), ToolkenCall())
    assert classify(checker, Attempt("<add>(1,2)=", True), fuzzy=False).kind is None
    assert classify(checker, Attempt("<add>(1,=", True), fuzzy=False).kind == "format"
    assert classify(checker, Attempt("<addd>(1,2)=", True), fuzzy=False).kind == "name"
    assert classify(checker, Attempt("<addd>(1,2)=", True), fuzzy=True).kind is None
    assert classify(checker, Attempt("<sqrt>(1,2)=", True), fuzzy=True).kind == "argument"
    assert classify(checker, Attempt("<multi", False), fuzzy=False).kind == "truncated"
    assert classify(checker, Attempt("<zzz", False), fuzzy=False).kind == "name"
    assert classify(checker, Attempt("<add>(1", False), fuzzy=False).kind == "truncated"


def test_the_reader_is_lenient() -> None:
    """Free decoding's calls are read with loose spacing, `parameters` and string-encoded arguments."""
    assert parse_call('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>').arguments == {"a": 1}
    assert parse_call('<tool_call> {"name": "f", "arguments": "{\\"a\\": 2}"} ').arguments == {"a": 2}
    with pytest.raises(ValueError):
        parse_call("<tool_call>{name: f}</tool_call>")


def test_compress_tools_caches_per_model_and_doc(tiny_lm: LoadedModel) -> None:
    """Rewrites each documentation once; a cached entry with the same key is kept, a changed doc is rewritten; a
    name reused with other documentation (as BFCL does across entries) gets its own description."""
    weather = ToolSpec("get_weather", "Weather of a city.", {"type": "object", "properties": {"city": {"type": "string"}}})
    area = ToolSpec("area", "Area.", {"type": "object", "properties": {"w": {"type": "number"}}})
    other_area = ToolSpec("area", "Area of a circle.", {"type": "object", "properties": {"r": {"type": "number"}}})
    specs = [weather, area, other_area, area]
    doc = compress_tools(tiny_lm, specs, "tiny", max_new_tokens=8)
    assert set(doc["tools"]) == {doc_key(weather), doc_key(area), doc_key(other_area)}
    assert doc["tools"][doc_key(area)]["tokens_before"] > 0 and doc["tools"][doc_key(other_area)]["name"] == "area"
    doc["tools"][doc_key(weather)]["description"] = "KEPT"
    doc["tools"][doc_key(area)]["key"] = "stale"
    doc["tools"][doc_key(other_area)]["description"] = "CIRCLE"
    again = compress_tools(tiny_lm, specs, "tiny", doc, max_new_tokens=8)
    assert again["tools"][doc_key(weather)]["description"] == "KEPT"
    assert again["tools"][doc_key(area)]["key"] == cache_key("tiny", area)
    assert cache_key("tiny", weather) != cache_key("other", weather)
    assert clean_description('  "Gets the weather of a city." \nmore') == "Gets the weather of a city."
    short = {key: entry["description"] for key, entry in again["tools"].items()}
    listed = shortened([weather, other_area], short)
    assert [t.description for t in listed] == ["KEPT", "CIRCLE"] and listed["area"].parameters == other_area.parameters
    assert compressed_block(listed) == "- get_weather(city): KEPT\n- area(r): CIRCLE"
    assert short_description(short, ToolSpec("new", "Untouched.", {"type": "object"})) == "Untouched."


def test_compress_tools_in_batches_saves_and_resumes(tiny_lm: LoadedModel) -> None:
    """Rewriting several documentations together writes what rewriting them one at a time writes; each batch is
    handed to `save`, and a run stopped after its first batch goes on from the saved document, rewriting only the
    rest."""
    specs = [
        ToolSpec(f"tool_{i}", f"Tool number {i} {'of many words ' * i}.",
                 {"type": "object", "properties": {f"p{i}": {"type": "integer"}}})
        for i in range(5)
    ]
    alone = compress_tools(tiny_lm, specs, "tiny", max_new_tokens=8, batch_size=1)
    together = compress_tools(tiny_lm, specs, "tiny", max_new_tokens=8, batch_size=3)
    assert together == alone and list(together["tools"]) == [doc_key(s) for s in specs]

    class Stop(Exception):
        pass

    saved: list[dict] = []

    def stop_after_first(part: dict) -> None:
        saved.append(part)
        raise Stop

    with pytest.raises(Stop):
        compress_tools(tiny_lm, specs, "tiny", max_new_tokens=8, batch_size=2, save=stop_after_first)
    assert list(saved[0]["tools"]) == [doc_key(s) for s in specs[:2]]
    rewritten: list[str] = []
    resumed = compress_tools(tiny_lm, specs, "tiny", saved[0], max_new_tokens=8, batch_size=2,
                             progress=rewritten.append)
    assert rewritten == [s.name for s in specs[2:]] and resumed == alone
    with pytest.raises(ValueError, match="batch_size"):
        compress_tools(tiny_lm, specs, "tiny", batch_size=0)


def test_cli_eval_writes_results_and_resumes(tiny_lm: LoadedModel, shared: Path, tmp_path: Path) -> None:
    """`tooldec eval` on a saved tiny model: results.json, table and plot; --resume keeps earlier records."""
    from typer.testing import CliRunner

    from tooldec.cli import app

    folder = tmp_path / "model"
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    out = tmp_path / "run"
    base = ["eval", "kamel", "--model", str(folder), "--decoding", "tooldec", "--tools", "30"]
    base += ["--shared", str(shared), "--out", str(out)]
    first = CliRunner().invoke(app, [*base, "--limit", "1"])
    assert first.exit_code == 0, first.output
    records = json.loads((out / "results.json").read_text())["records"]
    assert len(records) == 1
    second = CliRunner().invoke(app, [*base, "--limit", "2", "--resume"])
    assert second.exit_code == 0, second.output
    doc = json.loads((out / "results.json").read_text())
    assert [r["id"] for r in doc["records"]] == ["kamel-30-0", "kamel-30-1"]
    assert doc["records"][0] == records[0]
    assert doc["summary"]["tooldec"]["syntax_errors"]["any"] == 0.0
    assert (out / "results.md").exists() and (out / "accuracy_errors.png").exists()
    written = (out / "results.json").read_bytes()
    third = CliRunner().invoke(app, [*base, "--limit", "2", "--resume"])  # complete: nothing runs, nothing changes
    assert third.exit_code == 0 and "nothing to resume" in third.output, third.output
    assert (out / "results.json").read_bytes() == written


def test_cli_compress_tools_reads_every_entry_of_a_bfcl_category(
    tiny_lm: LoadedModel, shared: Path, tmp_path: Path
) -> None:
    """`tooldec compress-tools bfcl-simple` rewrites the functions of all the category's entries, one description
    per distinct documentation; an unknown category is a clear error."""
    from typer.testing import CliRunner

    from tooldec.cli import app
    from tooldec.eval.data import load_bfcl

    folder = tmp_path / "model"
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    out = tmp_path / "short.json"
    args = ["compress-tools", "bfcl-simple", "--model", str(folder), "--out", str(out), "--shared", str(shared)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    specs = [s for item in load_bfcl("bfcl-simple", shared).items for s in from_openai_tools(item.functions)]
    assert set(json.loads(out.read_text())["tools"]) == {doc_key(s) for s in specs}
    bad = CliRunner().invoke(app, ["compress-tools", "bfcl-nothing", "--model", str(folder), "--out", str(out),
                                   "--shared", str(shared)])
    assert bad.exit_code != 0 and "unknown BFCL category" in bad.output


def test_compressed_descriptions_shorten_the_prompt(tiny_lm: LoadedModel, shared: Path) -> None:
    """With short descriptions the tool block costs fewer tokens per tool; the note says before and after."""
    from tooldec.eval.data import load_restbench
    from tooldec.eval.restbench_sim import RestSimulator
    from tooldec.eval.run import compression_note

    tools = RestSimulator(load_restbench("restbench-tmdb", str(shared)).spec).tools
    short = {doc_key(tool): "Movie details." for tool in tools}
    bench = prepare("restbench-tmdb", tiny_lm, "tooldec", root=str(shared), compressed=short)
    record = bench.run(bench.items[1])
    assert record["syntax_error"] is None
    assert record["tokens_per_tool"] < record["tokens_per_tool_uncompressed"]
    note = compression_note([record])
    assert "before" in note and "after" in note


@pytest.mark.parametrize(("bench_name", "tools"), [("kamel", "30"), ("bfcl-simple", None)])
def test_fuzzy_replay_of_a_free_run_equals_decoding_it_again(
    tiny_lm: LoadedModel, shared: Path, tmp_path: Path, bench_name: str, tools: str | None
) -> None:
    """Scoring the free run's generations with fuzzy matching gives the records a fuzzy run decodes itself."""
    from typer.testing import CliRunner

    from tooldec.cli import app

    folder = tmp_path / "model"
    tiny_lm.model.save_pretrained(folder)
    tiny_lm.tokenizer.save_pretrained(folder)
    base = ["eval", bench_name, "--model", str(folder), "--shared", str(shared)]
    base += ["--tools", tools] if tools else []

    def run(decoding: str, name: str, *extra: str) -> list[dict[str, object]]:
        done = CliRunner().invoke(app, [*base, "--decoding", decoding, "--out", str(tmp_path / name), *extra])
        assert done.exit_code == 0, done.output
        return json.loads((tmp_path / name / "results.json").read_text())["records"]

    run("free", "free")
    replayed = run("fuzzy", "replayed", "--replay", str(tmp_path / "free"))
    decoded = run("fuzzy", "decoded")
    assert [r.pop("replayed_from") for r in replayed] == ["free"] * len(decoded)
    for a, b in zip(replayed, decoded, strict=True):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    wrong = CliRunner().invoke(app, [*base, "--decoding", "tooldec", "--replay", str(tmp_path / "free")])
    assert wrong.exit_code != 0 and "--replay" in wrong.output
    mismatch = CliRunner().invoke(app, [*base, "--decoding", "fuzzy", "--replay", str(tmp_path / "decoded")])
    assert mismatch.exit_code != 0 and "not a free run" in mismatch.output


@pytest.mark.parametrize("decoding", ["tooldec", "free"])
def test_required_tool_choice_starts_every_bfcl_answer_with_the_call_tag(
    tiny_lm: LoadedModel, shared: Path, decoding: str
) -> None:
    """Free decoding gets a forced `<tool_call>` (here a control token); ToolDec's answer is a call in any shape
    the syntax opens one (the model picks: a tag, a fence or a bare object); the record is scored as usual."""
    bench = prepare("bfcl-simple", tiny_lm, decoding, root=str(shared), tool_choice="required")
    auto = prepare("bfcl-simple", tiny_lm, decoding, root=str(shared))
    assert bench.config["tool_choice"] == "required"
    for record, unforced in zip(bench.run_batch(bench.items), auto.run_batch(auto.items), strict=True):
        if decoding == "free":
            assert record["forced_tokens"] >= 1 and unforced["forced_tokens"] == 0
        else:
            assert record["text"].startswith(HERMES.openings), record["text"][:40]
            assert record["syntax_error"] is None and record["calls"]


def test_required_tool_choice_is_refused_where_it_does_not_apply(tiny_lm: LoadedModel, shared: Path) -> None:
    for name in ("kamel", "funcqa-oh", "bfcl-irrelevance"):
        with pytest.raises(EvalError, match="tool-choice required"):
            prepare(name, tiny_lm, "tooldec", root=str(shared), tool_choice="required")
    with pytest.raises(EvalError, match="auto or required"):
        prepare("bfcl-simple", tiny_lm, "tooldec", root=str(shared), tool_choice="any")


def test_bfcl_can_compile_tooldec_calls_in_the_line_layout(tiny_lm: LoadedModel, shared: Path) -> None:
    """`--format hermes-lines` is recorded in the config (a run resumes only in its own format) and its guided
    calls are read and scored as compact ones; other benchmarks and formats are refused."""
    bench = prepare("bfcl-simple", tiny_lm, "tooldec", root=str(shared), tool_choice="required",
                    call_format="hermes-lines")
    assert bench.config["format"] == "hermes-lines"
    for record in bench.run_batch(bench.items):
        assert record["syntax_error"] is None and record["calls"], record["text"][:80]
    with pytest.raises(EvalError, match="--format"):
        prepare("kamel", tiny_lm, "tooldec", root=str(shared), call_format="hermes-lines")
    with pytest.raises(EvalError, match="--format"):
        prepare("bfcl-simple", tiny_lm, "tooldec", root=str(shared), call_format="python")
