"""BFCL: the chat template with the entry's functions, Hermes `<tool_call>` blocks, BFCL's AST matching."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from tooldec.agents.explain import guided_steps
from tooldec.backends.loader import LoadedModel
from tooldec.chat import ChatTemplate, build_policy, chat_syntax
from tooldec.chat.reader import call_at_end, parse_call, parse_calls
from tooldec.chat.template import with_instructions
from tooldec.decoding import FreeController, Trigger
from tooldec.decoding.decoder import Decoder, Generation
from tooldec.eval import data as datasets
from tooldec.eval.bfcl import check_entry
from tooldec.eval.compress import compressed_block, shortened
from tooldec.eval.metrics import SyntaxChecker, fuzzy_call
from tooldec.eval.runners.common import (
    Benchmark,
    batch_share,
    guidance_field,
    item_record,
    replayed,
    spelled_text,
)
from tooldec.eval.runners.scoring import call_format, chat_attempts, verdicts
from tooldec.grammar.calls import Aliased, CallParseError, ParsedCall, new_calls
from tooldec.specs import ToolSet, ToolSpec, from_openai_tools

BFCL_FORMATS = ("hermes", "hermes-lines")
"""The formats a BFCL run's ToolDec calls may be compiled in (both read back the same way)."""
HERMES = chat_syntax("hermes")
"""The call syntax of BFCL runs: Hermes/Qwen calls in tags, a fence or bare."""


BFCL_SYSTEM = (
    "You are a function-calling assistant. You may call these functions:\n{tools}\n\n"
    "To call a function, write exactly\n"
    '<tool_call>\n{{"name": "<function name>", "arguments": {{<arguments as a JSON object>}}}}\n</tool_call>\n'
    "Write one such block per call. If no function fits the request, answer in plain text without a call.\n"
    'Example: for "What is the weather in Paris in celsius?" and a function get_weather, write\n'
    '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "Paris", "unit": "celsius"}}}}\n</tool_call>'
)


def bfcl_messages(
    turns: Sequence[Mapping[str, Any]], specs: Sequence[ToolSpec], tool_text: str, uses_tools: bool
) -> list[dict[str, Any]]:
    """The first turn's messages, with a system message listing the tools when the template ignores them."""
    messages = [dict(m) for m in turns]
    return messages if uses_tools else with_instructions(messages, BFCL_SYSTEM.format(tools=tool_text))


def _bfcl_tools(specs: Sequence[ToolSpec], short: Mapping[str, str] | None) -> tuple[str, list[dict[str, Any]]]:
    """The tool listing for the system message and the tools given to the chat template."""
    if short is None:
        return "\n".join(json.dumps(s.to_openai(), ensure_ascii=False) for s in specs), [s.to_openai() for s in specs]
    renamed = shortened(specs, short)
    return compressed_block(renamed), [s.to_openai() for s in renamed]


def bfcl_calls(
    specs: Sequence[ToolSpec], text: str, finish_reason: str, decoding: str
) -> tuple[str | None, list[dict[str, Any]], list[ParsedCall]]:
    """A BFCL generation's syntax verdicts (the item's, then one per call) and the calls it made, read as scored:
    a call the text made before is left out (`new_calls`, the one rule for repeats that the guide, the reader and
    `tooldec serve` follow), in every decoding mode.

    The one reading of a recorded BFCL text: the runner scores generations with it and docs/results/rescore.py
    brings stored records to the current reading with it.
    """
    fuzzy = decoding == "fuzzy"
    fmt = call_format("hermes", specs, decoding)
    names = fmt.canonical if isinstance(fmt, Aliased) else {}

    def read(text: str) -> list[ParsedCall]:
        return [replace(c, name=names.get(c.name, c.name)) for c in parse_calls(text)]

    checker = SyntaxChecker(specs, fmt)
    attempts = chat_attempts(text, finish_reason == "length")
    kind, calls = verdicts(checker, attempts, fuzzy=fuzzy, parse=lambda t: read(t)[0])
    made: list[ParsedCall] = []
    for attempt in attempts:
        if not attempt.complete:
            continue
        try:
            made += new_calls([fuzzy_call(c, specs) if fuzzy else c for c in read(attempt.text)], made)
        except CallParseError:
            continue
    return kind, calls, made


def bfcl_verdict(category: str, item: datasets.BfclItem, made: Sequence[ParsedCall]) -> tuple[bool, str | None]:
    """Whether the calls `made` answer a BFCL entry (BFCL's AST matching), and why not."""
    try:
        verdict = check_entry(category, item.functions, list(made), item.possible_answer)
    except (ValueError, TypeError) as exc:
        return False, f"unmatchable: {exc}"
    return verdict.valid, verdict.error_type


def prepare_bfcl(
    benchmark: str,
    lm: LoadedModel,
    decoding: str,
    root: str | None,
    compressed: Mapping[str, str] | None,
    tool_choice: str,
    fmt: str = "hermes",
) -> Benchmark:
    """BFCL: the chat template with the tools, Hermes `<tool_call>` blocks (ToolDec's in format `fmt`), BFCL's
    AST matching."""
    data = datasets.load_bfcl(benchmark, root)
    parallel = data.category.startswith("parallel")
    max_calls = 8 if parallel else 1
    uses_tools = ChatTemplate.probe(lm.tokenizer).renders_tools
    compiler = lm.compiler
    decoder = Decoder(lm.model, lm.vocab)
    max_new = 256 if parallel else 160
    choice: Literal["auto", "required"] = "required" if tool_choice == "required" else "auto"
    start_tokens = Trigger(compiler.prepared, HERMES.trigger).tokens() if tool_choice == "required" else []
    syntax = HERMES.laid_out("lines" if fmt == "hermes-lines" else "compact")

    def start(item: datasets.BfclItem) -> tuple[list[int], Any]:
        """The entry's prompt (chat template with its functions) and the policy that decodes it."""
        specs = from_openai_tools(item.functions)
        tool_text, openai_tools = _bfcl_tools(specs, compressed)
        messages = bfcl_messages(item.question[0], specs, tool_text, uses_tools)
        prompt = lm.encode_chat(messages, tools=openai_tools if uses_tools else None)
        if decoding == "tooldec":
            return prompt, build_policy(compiler, ToolSet(specs), choice, syntax=syntax, parallel=parallel,
                                        max_calls=max_calls)
        return prompt, FreeController(
            lm.vocab, call_at_end, parse_call, after_call="text", max_calls=max_calls, start=start_tokens
        )

    def run_batch(batch: Sequence[datasets.BfclItem]) -> list[dict[str, Any]]:
        started = time.perf_counter()
        prompts, controllers = zip(*(start(item) for item in batch), strict=True)
        gens = decoder.generate(list(prompts), list(controllers), max_new_tokens=max_new, explain=decoding == "tooldec")
        seconds = batch_share(started, batch)
        return [score(item, gen, seconds) for item, gen in zip(batch, gens, strict=True)]

    def score(item: datasets.BfclItem, gen: Generation, seconds: float) -> dict[str, Any]:
        """Read the calls in one generation and match them against the entry's possible answers."""
        specs = from_openai_tools(item.functions)
        tool_text, _ = _bfcl_tools(specs, compressed)
        full_text, _ = _bfcl_tools(specs, None)
        text = spelled_text(lm.vocab, gen.tokens) if gen.tokens else gen.text  # a replayed record has no tokens
        kind, calls, made = bfcl_calls(specs, text, gen.finish_reason, decoding)
        correct, why = bfcl_verdict(data.category, item, made)
        return item_record(
            item.id,
            decoding,
            seconds,
            prediction=[{c.name: c.arguments} for c in made],
            gold=item.possible_answer,
            correct=correct,
            error_type=why,
            syntax_error=kind,
            calls=calls,
            text=text,
            finish_reason=gen.finish_reason,
            tokens_per_tool=len(lm.encode(tool_text)) / len(specs),
            tokens_per_tool_uncompressed=len(lm.encode(full_text)) / len(specs),
            generated_tokens=gen.sampled_tokens + gen.forced_tokens,
            forced_tokens=gen.forced_tokens,
            **guidance_field(lm, guided_steps(gen.extra.get("guided_steps", ())), decoding),
        )

    notes = [] if uses_tools else [
        f"{lm.name}'s chat template ignores tools: a system message lists them and the <tool_call> format."
    ]
    return Benchmark(
        benchmark,
        data.items,
        data.files,
        run_batch,
        notes=notes,
        config={"format": fmt, "tool_choice": tool_choice},
        replay=lambda item, record: score(item, replayed(record), float(record["seconds"])),
    )
