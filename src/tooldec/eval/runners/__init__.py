"""One benchmark item at a time, with a loaded model and a decoding mode: `tooldec`, `free` or `fuzzy`.

`prepare(benchmark, lm, decoding, ...)` loads the data and builds what every item shares (tools, prompts,
grammars); its `run(item)` returns the record report.py summarises: prediction, gold, `correct`, `syntax_error`
(None, "format", "name" or "argument": the first error among the item's calls), `calls` (the verdict of each
call the model started), `tokens_per_tool` (tool documentation in the prompt), `seconds` and
`generated_tokens`. A call cut off by the token limit is marked `truncated` and is not a syntax error in any
mode. ToolDec may name a tool by a unique suffix of its name (`<children>` for `number_of_children`, see
`with_aliases`); its calls are read with the same aliases, so they are scored under the tool's own name.

One module per concept: `common` (the prepared `Benchmark`, the decoding modes, a record's fields), `scoring`
(the call attempts of a generation and their syntax verdicts), `toolken` (FuncQA and KAMEL), `restbench` and
`bfcl`; this module chooses among them and keeps the names callers import from `tooldec.eval.runners`.
"""

from __future__ import annotations

from collections.abc import Mapping

from tooldec.backends.loader import LoadedModel
from tooldec.eval.compress import compressed_block, shortened
from tooldec.eval.runners.bfcl import BFCL_FORMATS, BFCL_SYSTEM, bfcl_calls, bfcl_messages, prepare_bfcl
from tooldec.eval.runners.common import (
    DECODINGS,
    Benchmark,
    Decoding,
    EvalError,
    FuzzyExecutor,
    replayed,
    spelled_text,
)
from tooldec.eval.runners.restbench import SIMULATED_NOTE, prepare_restbench, react_checker
from tooldec.eval.runners.scoring import (
    Attempt,
    call_format,
    chat_attempts,
    classify,
    react_attempts,
    toolken_attempts,
    verdicts,
)
from tooldec.eval.runners.toolken import KAMEL_DEMOS, kamel_prompt, prepare_funcqa, prepare_kamel

__all__ = [
    "BENCHMARKS", "BFCL_FORMATS", "BFCL_SYSTEM", "DECODINGS", "KAMEL_DEMOS", "SIMULATED_NOTE", "Attempt", "Benchmark",
    "Decoding", "EvalError", "FuzzyExecutor", "bfcl_calls", "bfcl_messages", "call_format", "chat_attempts",
    "classify", "compressed_block", "kamel_prompt", "prepare", "react_attempts", "react_checker", "replayed",
    "shortened", "spelled_text", "toolken_attempts", "verdicts",
]

BENCHMARKS: tuple[str, ...] = (
    "funcqa-oh",
    "funcqa-mh",
    "kamel",
    "restbench-tmdb",
    "restbench-spotify",
    "bfcl-simple",
    "bfcl-multiple",
    "bfcl-parallel",
    "bfcl-parallel-multiple",
    "bfcl-irrelevance",
)


def _check_decoding(decoding: str) -> None:
    """EvalError for an unknown decoding mode."""
    if decoding not in DECODINGS:
        raise EvalError(f"unknown decoding {decoding!r}; known: {', '.join(DECODINGS)}")


def prepare(
    benchmark: str,
    lm: LoadedModel,
    decoding: str,
    *,
    root: str | None = None,
    tools: int | None = None,
    compressed: Mapping[str, str] | None = None,
    tool_choice: str = "auto",
    call_format: str = "hermes",
) -> Benchmark:
    """Load `benchmark`'s data and build its item runner for `lm` under `decoding`.

    `tool_choice="required"` (BFCL's call categories only) starts every answer with the `<tool_call>` tag in
    every decoding mode, as a serving stack does for a required call; "auto" leaves the choice to the model.
    `call_format` (BFCL only) is the Hermes format ToolDec's calls are compiled in: `hermes` (compact) or
    `hermes-lines` (pretty-printed JSON admitted too).
    """
    _check_decoding(decoding)
    if tool_choice not in ("auto", "required"):
        raise EvalError(f"tool_choice must be auto or required, not {tool_choice!r}")
    if tool_choice == "required" and (not benchmark.startswith("bfcl-") or benchmark == "bfcl-irrelevance"):
        raise EvalError(f"--tool-choice required applies to BFCL's call categories, not {benchmark!r}")
    if call_format not in BFCL_FORMATS or (call_format != "hermes" and not benchmark.startswith("bfcl-")):
        raise EvalError(f"--format is one of {', '.join(BFCL_FORMATS)}, for BFCL only (not {call_format!r} on {benchmark!r})")
    if benchmark in ("funcqa-oh", "funcqa-mh"):
        bench = prepare_funcqa(benchmark, lm, decoding, root)
    elif benchmark == "kamel":
        bench = prepare_kamel(lm, decoding, root, tools or 30)
    elif benchmark in ("restbench-tmdb", "restbench-spotify"):
        bench = prepare_restbench(benchmark, lm, decoding, root, compressed)
    elif benchmark.startswith("bfcl-") and benchmark in BENCHMARKS:
        bench = prepare_bfcl(benchmark, lm, decoding, root, compressed, tool_choice, call_format)
    else:
        raise EvalError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    bench.config["tool_names"] = "names and unique suffixes" if decoding == "tooldec" else "names"
    return bench
