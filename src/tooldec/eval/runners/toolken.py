"""FuncQA and KAMEL: ToolkenGPT's inline `<tool>(args)=` calls, one answer per question."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from tooldec.agents.executor import ToolExecutor
from tooldec.agents.explain import guided_steps
from tooldec.agents.toolken import ToolkenAgent
from tooldec.backends.loader import LoadedModel
from tooldec.decoding import CallController, FreeController
from tooldec.decoding.decoder import Decoder, Generation
from tooldec.decoding.prefix import PromptPrefix
from tooldec.eval import data as datasets
from tooldec.eval.metrics import SyntaxChecker, funcqa_correct, parse_number
from tooldec.eval.runners.common import (
    Benchmark,
    FuzzyExecutor,
    batch_share,
    guidance_field,
    item_record,
    replayed,
)
from tooldec.eval.runners.scoring import Attempt, call_format, classify, toolken_attempts, verdicts
from tooldec.toolsets.funcqa import FUNCQA_FUNCTIONS, funcqa_tools
from tooldec.toolsets.kamel import kamel_tools

TOOLKEN_CALL = re.compile(r"<([A-Za-z_][\w.\-]*)>\(([^()]*)\)=$")


def prepare_funcqa(benchmark: str, lm: LoadedModel, decoding: str, root: str | None) -> Benchmark:
    """FuncQA with ToolkenGPT's templates: inline `<tool>(args)=` calls, the tool's result after `=`."""
    data = datasets.load_funcqa(benchmark, root)
    tools = funcqa_tools()
    executor_cls = FuzzyExecutor if decoding == "fuzzy" else ToolExecutor
    max_new = 160 if data.split == "mh" else 112
    agent = ToolkenAgent(
        lm, executor_cls(FUNCQA_FUNCTIONS, tools), guided=decoding == "tooldec", max_new_tokens=max_new,
        explain=decoding == "tooldec",
    )
    checker = SyntaxChecker(tools, call_format("toolken", tools, decoding))
    tool_line = data.template.splitlines()[0]
    per_tool = len(lm.encode(tool_line)) / len(tools)

    prefix = PromptPrefix.build(lm.model, lm.tokenizer.encode(datasets.funcqa_prompt(data.template, "")))

    def run_batch(batch: Sequence[datasets.FuncQAItem]) -> list[dict[str, Any]]:
        started = time.perf_counter()
        prompts = [datasets.funcqa_prompt(data.template, item.question) for item in batch]
        results = agent.run_many([item.question for item in batch], prompts=prompts, prefix=prefix)
        seconds = batch_share(started, batch)
        records = []
        for item, result in zip(batch, results, strict=True):
            kind, calls = verdicts(
                checker, toolken_attempts(result.text, result.tokens >= max_new), fuzzy=decoding == "fuzzy"
            )
            records.append(
                item_record(
                    item.id,
                    decoding,
                    seconds,
                    question=item.question,
                    prediction=parse_number(result.text),
                    gold=item.answer,
                    correct=funcqa_correct(result.text, item.answer),
                    syntax_error=kind,
                    calls=calls,
                    text=result.text,
                    tokens_per_tool=per_tool,
                    generated_tokens=result.tokens,
                    forced_tokens=result.forced_tokens,
                    **guidance_field(lm, result.guided, decoding),
                )
            )
        return records

    return Benchmark(benchmark, data.items, data.files, run_batch, config={"format": "toolken"})


KAMEL_DEMOS = (
    ("Which country is the Eiffel Tower located in?", "location", "Eiffel Tower"),
    ("Who were the employers of Alan Turing?", "employer", "Alan Turing"),
    ("What are the main topics of the book A Brief History of Time?", "main_topics", "A Brief History of Time"),
)
"""Hand-written few-shot examples; their relations are among the first 10 of KAMEL's order."""


def kamel_prompt(question: str, names: Sequence[str]) -> str:
    """The KAMEL prompt: relation names only (no descriptions, as in the ToolDec paper), demos, the question."""
    demos = "".join(f'Q: {q}\n<{rel}>("{arg}")=\n\n' for q, rel, arg in KAMEL_DEMOS)
    return (
        "Answer each question by calling one of these relations with the subject of the question: "
        + ", ".join(names)
        + ".\n\n"
        + demos
        + f"Q: {question}\n"
    )


def prepare_kamel(lm: LoadedModel, decoding: str, root: str | None, k: int) -> Benchmark:
    """KAMEL: pick a relation among the first `k` by name and write its argument, one toolken call."""
    data = datasets.load_kamel(k, root)
    relations, rel_files = datasets.load_kamel_relations(root)
    kt = kamel_tools(relations, k)
    names = list(kt.tools.names)
    fmt = call_format("toolken", kt.tools, decoding)
    checker = SyntaxChecker(kt.tools, fmt)
    grammar = lm.compiler.compile(kt.tools, fmt) if decoding == "tooldec" else None
    per_tool = len(lm.encode(", ".join(names))) / len(names)
    decoder = Decoder(lm.model, lm.vocab)
    max_new = 48

    prefix = PromptPrefix.build(lm.model, lm.encode(kamel_prompt("", names)))

    def run_batch(batch: Sequence[datasets.KamelItem]) -> list[dict[str, Any]]:
        started = time.perf_counter()
        controllers: list[CallController | FreeController] = [
            CallController(grammar, trigger="<", tool_choice="required", after_call="stop", max_calls=1)
            if grammar is not None
            else FreeController(lm.vocab, TOOLKEN_CALL, fmt.parse, after_call="stop", max_calls=1, stop=("\n",))
            for _ in batch
        ]
        prompts = [lm.encode(kamel_prompt(item.question, names)) for item in batch]
        gens = decoder.generate(prompts, controllers, max_new_tokens=max_new, prefix=prefix, explain=grammar is not None)
        seconds = batch_share(started, batch)
        return [_kamel_record(item, gen, seconds) for item, gen in zip(batch, gens, strict=True)]

    def _kamel_record(item: datasets.KamelItem, gen: Generation, seconds: float) -> dict[str, Any]:
        """Score one generation: the relation of the first call on the answer line."""
        line = gen.text.strip().split("\n")[0]
        line = line[: line.index(")=") + 2] if ")=" in line else line
        attempt = Attempt(line, gen.finish_reason == "stop" or ")=" in line)
        check = classify(checker, attempt, fuzzy=decoding == "fuzzy")
        name = check.call.name if check.call is not None and check.kind in (None, "argument") else None
        relation = kt.relation_of.get(name) if name else None
        return item_record(
            item.id,
            decoding,
            seconds,
            question=item.question,
            prediction=relation,
            predicted_tool=name,
            gold=item.relation,
            correct=relation == item.relation,
            syntax_error=check.kind if check.kind != "truncated" else None,
            calls=[{"text": line, "kind": check.kind, "message": check.message[:200]}],
            text=gen.text,
            finish_reason=gen.finish_reason,
            tokens_per_tool=per_tool,
            generated_tokens=gen.sampled_tokens + gen.forced_tokens,
            forced_tokens=gen.forced_tokens,
            **guidance_field(lm, guided_steps(gen.extra.get("guided_steps", ())), decoding),
        )

    return Benchmark(
        "kamel",
        data.items,
        {**data.files, **rel_files},
        run_batch,
        config={"tools": k, "format": "toolken"},
        replay=lambda item, record: _kamel_record(item, replayed(record), float(record["seconds"])),
    )
