"""The `tooldec` command line."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tooldec.errors import ToolDecError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Tool calls without syntax errors.")
err = Console(stderr=True)


def _fail(message: str) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


@app.command()
def sample(
    tools: Path = typer.Option(..., "--tools", help="OpenAI-style tools list (JSON), a BFCL entry, or OpenAPI."),
    tokenizer: Path = typer.Option(..., "--tokenizer", help="tokenizer.json (or its folder)."),
    format: str = typer.Option("json", "--format", help="Call format: json | python | hermes."),
    n: int = typer.Option(1, "--n", min=1, help="Number of walks."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="Give up a walk after this many tokens."),
) -> None:
    """Walk the guide choosing uniformly among allowed tokens; print one JSON line per walk."""
    sys.set_int_max_str_digits(0)  # uniform walks write integers of thousands of digits
    from tooldec.compiler import Compiler
    from tooldec.sample import random_walk
    from tooldec.specs import load_tools_file
    from tooldec.vocab import Vocabulary

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


def main() -> None:
    """Entry point for `python -m tooldec`."""
    app()


if __name__ == "__main__":
    main()
