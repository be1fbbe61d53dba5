"""The structured-output side of the command line: `tooldec sample --grammar | --regex | --schema | --choice` and
`tooldec check-grammar`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Literal

import typer

from tooldec.cfg_guide import CompiledCfg
from tooldec.errors import TokenRejectedError, ToolDecError
from tooldec.structured import Choice, Grammar, JsonSchema, OutputType, Regex
from tooldec.vocab import Vocabulary

BYTE_VOCAB_EOS = 256


def grammar_syntax(path: Path) -> Literal["lark", "gbnf"]:
    """The syntax of a grammar file, by its extension (.lark or .gbnf)."""
    if path.suffix == ".lark":
        return "lark"
    if path.suffix == ".gbnf":
        return "gbnf"
    raise ToolDecError(f"{path}: a grammar file must end in .lark or .gbnf")


def vocabulary(tokenizer: Path | None) -> Vocabulary:
    """The tokenizer's vocabulary, or single bytes without one."""
    if tokenizer is None:
        return Vocabulary.from_bytes([bytes([b]) for b in range(256)] + [None], eos_id=BYTE_VOCAB_EOS)
    return Vocabulary.from_file(tokenizer)


def grammar_file(path: Path) -> Grammar:
    """The grammar in `path`, its syntax by the file's extension."""
    return Grammar(path.read_text(encoding="utf-8"), grammar_syntax(path))


def compile_grammar_file(path: Path, tokenizer: Path | None) -> CompiledCfg:
    """The grammar in `path` compiled over the tokenizer's vocabulary, or over single bytes without one."""
    from tooldec.compiler import Compiler

    grammar = grammar_file(path)
    return Compiler(vocabulary(tokenizer)).compile_grammar(grammar.text, grammar.syntax)


def read_output(*, grammar: Path | None, regex: str | None, schema: Path | None, choice: str | None) -> OutputType:
    """The output type `tooldec sample` was given (exactly one source is given, the caller checked): a grammar
    file, a regex, a JSON Schema file, or comma-separated choices. Raises ToolDecError or OSError."""
    if grammar is not None:
        return grammar_file(grammar)
    if regex is not None:
        return Regex(regex)
    if schema is not None:
        return JsonSchema(schema.read_text(encoding="utf-8"))
    assert choice is not None
    return Choice(choice.split(","))


def sample_output(output: OutputType, tokenizer: Path | None, n: int, seed: int, max_tokens: int,
                  as_json: bool) -> None:
    """Print `n` random guided outputs: the raw texts, or with `as_json` one object per line as for tools,
    `{"text", "value", "tokens"}` (the value parsed: the JSON of a schema, the text of the others)."""
    from tooldec.compiler import Compiler
    from tooldec.sample import random_walk

    compiled = output.compile(Compiler(vocabulary(tokenizer)))
    rng = random.Random(seed)
    for _ in range(n):
        guide = random_walk(compiled.guide(), rng, max_tokens=max_tokens, steer_after=max_tokens // 4)
        text = guide.text()
        line = {"text": text, "value": output.parse(text), "tokens": guide.num_tokens}
        print(json.dumps(line, ensure_ascii=False) if as_json else text, flush=True)


def check_grammar(
    grammar: Path = typer.Argument(..., help="A grammar file (.lark or .gbnf)."),
    texts: list[Path] = typer.Argument(..., help="Text files to check against it."),
    tokenizer: Path = typer.Option(..., "--tokenizer", help="tokenizer.json (or its folder)."),
) -> None:
    """Feed each text token by token through the grammar's guide: accepted to its end, or where it is rejected.
    Exit 0 when every text is accepted, 1 when some is rejected, 2 on an error."""
    from tooldec.cli import _fail

    try:
        compiled = compile_grammar_file(grammar, tokenizer)
        bodies = [t.read_text(encoding="utf-8") for t in texts]
    except (ToolDecError, OSError) as exc:
        _fail(str(exc))
    vocab = compiled.prepared.vocab
    rejected = 0
    for path, body in zip(texts, bodies, strict=True):
        data = body.encode()
        guide = compiled.guide()
        where: int | None = None
        done = 0
        for token in vocab.encode(body):
            try:
                guide.advance(token)  # one walk of the token: a rejected one leaves the guide as it was
            except TokenRejectedError:
                where = done
                break
            done += len(vocab.token_bytes[token] or b"")
        if where is None and not guide.is_accepting():
            where = done
        if where is None:
            print(f"{path}: accepted")
            continue
        rejected += 1
        head = data[:where].decode("utf-8", errors="replace")
        line, column = head.count("\n") + 1, len(head) - (head.rfind("\n") + 1) + 1
        what = "ends too early" if where >= len(data) else f"rejected at line {line}, column {column}"
        print(f"{path}: {what} (byte {where}): {data[where:where + 20]!r}")
    raise typer.Exit(1 if rejected else 0)
