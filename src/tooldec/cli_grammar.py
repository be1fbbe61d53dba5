"""The grammar side of the command line: `tooldec sample --grammar` and `tooldec check-grammar`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Literal

import typer

from tooldec.cfg_guide import CompiledCfg
from tooldec.errors import TokenRejectedError, ToolDecError

BYTE_VOCAB_EOS = 256


def grammar_syntax(path: Path) -> Literal["lark", "gbnf"]:
    """The syntax of a grammar file, by its extension (.lark or .gbnf)."""
    if path.suffix == ".lark":
        return "lark"
    if path.suffix == ".gbnf":
        return "gbnf"
    raise ToolDecError(f"{path}: a grammar file must end in .lark or .gbnf")


def compile_grammar_file(path: Path, tokenizer: Path | None) -> CompiledCfg:
    """The grammar in `path` compiled over the tokenizer's vocabulary, or over single bytes without one."""
    from tooldec.compiler import Compiler
    from tooldec.vocab import Vocabulary

    syntax = grammar_syntax(path)
    text = path.read_text(encoding="utf-8")
    if tokenizer is None:
        vocab = Vocabulary.from_bytes([bytes([b]) for b in range(256)] + [None], eos_id=BYTE_VOCAB_EOS)
    else:
        vocab = Vocabulary.from_file(tokenizer)
    return Compiler(vocab).compile_grammar(text, syntax)


def sample_grammar(path: Path, tokenizer: Path | None, n: int, seed: int, max_tokens: int, as_json: bool) -> None:
    """Print `n` random guided sentences of the grammar (raw, or one JSON string per line)."""
    from tooldec.sample import random_walk

    compiled = compile_grammar_file(path, tokenizer)
    rng = random.Random(seed)
    for _ in range(n):
        guide = random_walk(compiled.guide(), rng, max_tokens=max_tokens, steer_after=max_tokens // 4)
        print(json.dumps(guide.text(), ensure_ascii=False) if as_json else guide.text(), flush=True)


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
