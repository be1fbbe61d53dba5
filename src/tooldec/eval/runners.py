"""One benchmark item at a time, with a loaded model and a decoding mode: `tooldec`, `free` or `fuzzy`.

`prepare(benchmark, lm, decoding, ...)` loads the data and builds what every item shares (tools, prompts,
grammars); its `run(item)` returns the record report.py summarises: prediction, gold, `correct`, `syntax_error`
(None, "format", "name" or "argument": the first error among the item's calls), `calls` (the verdict of each
call the model started), `tokens_per_tool` (tool documentation in the prompt), `seconds` and
`generated_tokens`. A call cut off by the token limit is marked `truncated` and is not a syntax error in any
mode. Chat calls (BFCL) are read by the chat layer's one reader in every mode (`tooldec.chat.reader`: tags,
fences, bare objects and lists); toolken and ReAct calls by the format's own parser.
Fuzzy decoding maps every tool name to the nearest existing one before it runs or is scored. ToolDec may name a
tool by a unique suffix of its name (`<children>` for `number_of_children`, see `with_aliases`); its calls are
read with the same aliases, so they are scored under the tool's own name.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tooldec.agents.executor import ToolExecutor, ToolResult
from tooldec.agents.explain import guided_steps, summarize
from tooldec.agents.react import FINISH, ReactAgent, describe_tools, react_prompt
from tooldec.agents.toolken import ToolkenAgent
from tooldec.backends.loader import LoadedModel
from tooldec.chat import ChatTemplate, build_policy, chat_syntax
from tooldec.chat.reader import call_at_end, call_blocks, parse_call, parse_calls
from tooldec.chat.template import with_instructions
from tooldec.decoding import CallController, FreeController, Trigger
from tooldec.decoding.decoder import Decoder, Generation
from tooldec.decoding.prefix import PromptPrefix
from tooldec.errors import ToolDecError
from tooldec.eval import data as datasets
from tooldec.eval.bfcl import check_entry
from tooldec.eval.compress import short_description
from tooldec.eval.metrics import (
    SyntaxCheck,
    SyntaxChecker,
    correct_path,
    funcqa_correct,
    fuzzy_call,
    parse_number,
)
from tooldec.eval.restbench_sim import RestSimulator
from tooldec.grammar.calls import (
    Aliased,
    CallFormat,
    CallParseError,
    ParsedCall,
    get_format,
    with_aliases,
)
from tooldec.specs import ToolSet, ToolSpec, from_openai_tools
from tooldec.toolsets.funcqa import FUNCQA_FUNCTIONS, funcqa_tools
from tooldec.toolsets.kamel import kamel_tools

Decoding = Literal["tooldec", "free", "fuzzy"]
DECODINGS: tuple[str, ...] = ("tooldec", "free", "fuzzy")
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
SIMULATED_NOTE = (
    "RestBench responses are simulated: a local simulator returns schema-shaped data from the OpenAPI "
    "document (no network); only the plan of calls is scored (correct path rate)."
)
TOOLKEN_CALL = re.compile(r"<([A-Za-z_][\w.\-]*)>\(([^()]*)\)=$")
BFCL_FORMATS = ("hermes", "hermes-lines")
"""The formats a BFCL run's ToolDec calls may be compiled in (both read back the same way)."""
HERMES = chat_syntax("hermes")
"""The call syntax of BFCL runs: Hermes/Qwen calls in tags, a fence or bare."""


class EvalError(ToolDecError, ValueError):
    """An unknown benchmark or decoding mode, or options that do not fit the benchmark."""


@dataclass
class Benchmark:
    """A prepared benchmark: its items, data file hashes, report notes and the runner of a batch of items.

    `run_batch(items)` decodes the items together (one row each) and returns one record per item, in order.
    """

    name: str
    items: Sequence[Any]
    files: dict[str, str]
    run_batch: Callable[[Sequence[Any]], list[dict[str, Any]]]
    notes: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    replay: Callable[[Any, Mapping[str, Any]], dict[str, Any]] | None = None
    """For one-shot benchmarks: an item's record rebuilt from another mode's record of the same generation."""

    def run(self, item: Any) -> dict[str, Any]:
        """The record of one item, decoded alone."""
        return self.run_batch([item])[0]


class FuzzyExecutor(ToolExecutor):
    """An executor that first maps the tool name to the nearest existing one (the fuzzy-matching baseline)."""

    def run(self, call: ParsedCall) -> ToolResult:
        """Run `call` with its name mapped to the nearest tool name."""
        return super().run(fuzzy_call(call, self.tools))


@dataclass
class Attempt:
    """A stretch of generated text where the model started a call, and whether the token limit cut it off."""

    text: str
    complete: bool


Parser = Callable[[str], ParsedCall]


def classify(checker: SyntaxChecker, attempt: Attempt, *, fuzzy: bool, parse: Parser | None = None) -> SyntaxCheck:
    """The verdict on one call attempt (read by `parse`, else the format's parser); fuzzy maps the name first."""
    if not attempt.complete:
        return _truncated(checker, attempt.text)
    try:
        call = (parse or checker.format.parse)(attempt.text)
    except CallParseError as err:
        return SyntaxCheck("format", str(err))
    if fuzzy and isinstance(call.name, str):
        call = fuzzy_call(call, checker.tools)
    return checker.check(call)


_PARTIAL_NAME = {
    "toolken": re.compile(r"<([^>(]*)(>)?"),
    "react": re.compile(r"Action: *([^\n]*)(\n)?"),
}
_PARTIAL_JSON_NAME = re.compile(r'"name"\s*:\s*"([^"]*)(")?')


def _truncated(checker: SyntaxChecker, text: str) -> SyntaxCheck:
    """A call cut off by the token limit: a name error if its (partial) name fits no tool, else `truncated`."""
    m = _PARTIAL_NAME.get(checker.format.name, _PARTIAL_JSON_NAME).search(text)
    if m is not None:
        name, closed = m.group(1).strip(), m.group(2) is not None
        names = [*checker.tools.names, *(checker.format.canonical if isinstance(checker.format, Aliased) else ())]
        if (closed and name not in names) or not any(n.startswith(name) for n in names):
            return SyntaxCheck("name", f"no tool named {name!r} (cut off by the token limit)")
    return SyntaxCheck("truncated", "cut off by the token limit")


def verdicts(
    checker: SyntaxChecker, attempts: Sequence[Attempt], *, fuzzy: bool, parse: Parser | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The item's syntax error (first error among its calls) and one verdict per attempt."""
    checks = [classify(checker, a, fuzzy=fuzzy, parse=parse) for a in attempts]
    rows = [
        {"text": a.text, "kind": c.kind, "message": c.message[:200]} for a, c in zip(attempts, checks, strict=True)
    ]
    first = next((c.kind for c in checks if c.kind not in (None, "truncated")), None)
    return first, rows


def toolken_attempts(text: str, truncated: bool) -> list[Attempt]:
    """Every `<name` in the text up to its `=`; an unfinished last one is cut off when `truncated`."""
    out = []
    for m in re.finditer(r"<[A-Za-z_]", text):
        end = text.find("=", m.start())
        if end < 0:
            out.append(Attempt(text[m.start() :].rstrip(), not truncated))
        else:
            out.append(Attempt(text[m.start() : end + 1], True))
    return out


def react_attempts(text: str, truncated: bool) -> list[Attempt]:
    """Every `Action:` up to the next Observation/Thought/Action, as one newline-ended action text; the last one,
    when the token limit cut it off, as written (a newline added there would close a name the model never
    finished: `Action: ` would read as an empty name)."""
    starts = [m.start() for m in re.finditer(r"Action:", text)]
    out = []
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else len(text)
        chunk = text[start:stop]
        cut = min((p for p in (chunk.find("\nObservation:"), chunk.find("\nThought:")) if p >= 0), default=-1)
        ended = cut >= 0 or i + 1 < len(starts)
        chunk = chunk[:cut] if cut >= 0 else chunk
        complete = ended or not truncated
        out.append(Attempt(chunk.rstrip("\n") + "\n" if complete else chunk, complete))
    return out


def chat_attempts(text: str, truncated: bool) -> list[Attempt]:
    """Every call block of a chat answer, in every shape (`tooldec.chat.reader.call_blocks`), the same in every
    decoding mode; a block the text ends inside is cut off when `truncated`, else complete (and unreadable)."""
    return [Attempt(text[b.start : b.end].rstrip(), not (b.cut and truncated)) for b in call_blocks(text)]


def call_format(fmt: str, tools: ToolSet | Sequence[ToolSpec], decoding: str) -> CallFormat:
    """The format ToolDec's calls are compiled and read in: `fmt` with the tools' suffix aliases; others' `fmt`."""
    return with_aliases(fmt, tools) if decoding == "tooldec" else get_format(fmt)


def spelled_text(vocab: Any, tokens: Sequence[int]) -> str:
    """A generation's text with its control tokens but EOS written by name: a `<tool_call>` that is one special
    token of the tokenizer is part of the call the record scores (`Generation.text` leaves it out)."""
    names = {v: k for k, v in vocab.special_ids.items()}
    parts = [vocab.token_bytes[t] or names.get(t, "").encode() for t in tokens if t not in vocab.eos_ids]
    return b"".join(parts).decode("utf-8", errors="replace")


def _guidance(lm: LoadedModel, steps: Sequence[Any], decoding: str) -> dict[str, Any]:
    """A ToolDec record's `guidance` field: the mass its masks removed and where they overrode the model."""
    return {"guidance": summarize(steps, lm.vocab)} if decoding == "tooldec" else {}


def _record(item_id: str, decoding: str, seconds: float, **fields: Any) -> dict[str, Any]:
    """A record with the common fields; `seconds` is the item's share of its batch's wall time."""
    return {"id": item_id, "decoding": decoding, **fields, "seconds": round(seconds, 3)}


def _share(started: float, batch: Sequence[Any]) -> float:
    """Wall seconds since `started`, divided among the batch's items."""
    return (time.perf_counter() - started) / max(len(batch), 1)


def replayed(record: Mapping[str, Any]) -> Generation:
    """The generation a record describes (its text, finish reason and token counts), to score it again."""
    forced = int(record.get("forced_tokens", 0))
    return Generation(
        [],
        str(record["text"]),
        [],
        str(record["finish_reason"]),
        sampled_tokens=int(record["generated_tokens"]) - forced,
        forced_tokens=forced,
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
        bench = _funcqa(benchmark, lm, decoding, root)
    elif benchmark == "kamel":
        bench = _kamel(lm, decoding, root, tools or 30)
    elif benchmark in ("restbench-tmdb", "restbench-spotify"):
        bench = _restbench(benchmark, lm, decoding, root, compressed)
    elif benchmark.startswith("bfcl-") and benchmark in BENCHMARKS:
        bench = _bfcl(benchmark, lm, decoding, root, compressed, tool_choice, call_format)
    else:
        raise EvalError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    bench.config["tool_names"] = "names and unique suffixes" if decoding == "tooldec" else "names"
    return bench


def _funcqa(benchmark: str, lm: LoadedModel, decoding: str, root: str | None) -> Benchmark:
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
        seconds = _share(started, batch)
        records = []
        for item, result in zip(batch, results, strict=True):
            kind, calls = verdicts(
                checker, toolken_attempts(result.text, result.tokens >= max_new), fuzzy=decoding == "fuzzy"
            )
            records.append(
                _record(
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
                    **_guidance(lm, result.guided, decoding),
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


def _kamel(lm: LoadedModel, decoding: str, root: str | None, k: int) -> Benchmark:
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
        seconds = _share(started, batch)
        return [_kamel_record(item, gen, seconds) for item, gen in zip(batch, gens, strict=True)]

    def _kamel_record(item: datasets.KamelItem, gen: Generation, seconds: float) -> dict[str, Any]:
        """Score one generation: the relation of the first call on the answer line."""
        line = gen.text.strip().split("\n")[0]
        line = line[: line.index(")=") + 2] if ")=" in line else line
        attempt = Attempt(line, gen.finish_reason == "stop" or ")=" in line)
        check = classify(checker, attempt, fuzzy=decoding == "fuzzy")
        name = check.call.name if check.call is not None and check.kind in (None, "argument") else None
        relation = kt.relation_of.get(name) if name else None
        return _record(
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
            **_guidance(lm, guided_steps(gen.extra.get("guided_steps", ())), decoding),
        )

    return Benchmark(
        "kamel",
        data.items,
        {**data.files, **rel_files},
        run_batch,
        config={"tools": k, "format": "toolken"},
        replay=lambda item, record: _kamel_record(item, replayed(record), float(record["seconds"])),
    )


def shortened(tools: Iterable[ToolSpec], short: Mapping[str, str]) -> ToolSet:
    """The tools with their short descriptions (`tooldec compress-tools`, keyed by documentation), parameters kept."""
    return ToolSet([ToolSpec(t.name, short_description(short, t), t.parameters) for t in tools])


def compressed_block(tools: ToolSet) -> str:
    """One line per tool, `name(param, ...): description`, without types or syntax (for shortened tools)."""
    lines = []
    for tool in tools:
        params = ", ".join(tool.parameters.get("properties", {}))
        lines.append(f"- {tool.name}({params}): {tool.description}")
    return "\n".join(lines)


def react_checker(tools: ToolSet, decoding: str) -> SyntaxChecker:
    """The syntax checker of ReAct actions over `tools` and Finish (with ToolDec's name aliases when guided)."""
    acting = ToolSet([*tools, FINISH])
    return SyntaxChecker(acting, call_format("react", acting, decoding))


def _restbench(
    benchmark: str, lm: LoadedModel, decoding: str, root: str | None, compressed: Mapping[str, str] | None
) -> Benchmark:
    """RestBench: a ReAct plan over the scenario's operations, answered by the simulator; correct path rate."""
    data = datasets.load_restbench(benchmark, root)
    sim = RestSimulator(data.spec)
    tools = sim.tools
    functions = {name: _simulated(sim, name) for name in tools.names}
    executor_cls = FuzzyExecutor if decoding == "fuzzy" else ToolExecutor
    builder: Callable[[str, ToolSet], str] = react_prompt
    if compressed is not None:
        short = dict(compressed)

        def builder(question: str, tool_set: ToolSet) -> str:
            return react_prompt(question, tool_set).replace(
                describe_tools(tool_set), compressed_block(shortened(tool_set, short))
            )

    max_new = 384
    agent = ReactAgent(
        lm,
        executor_cls(functions, tools),
        guided=decoding == "tooldec",
        max_steps=5,
        max_new_tokens=max_new,
        prompt_builder=builder,
        explain=decoding == "tooldec",
    )
    checker = react_checker(tools, decoding)
    full_text = describe_tools(tools)
    shown = compressed_block(shortened(tools, compressed)) if compressed is not None else full_text
    per_tool = len(lm.encode(shown)) / len(tools)
    per_tool_full = len(lm.encode(full_text)) / len(tools)

    prefix = PromptPrefix.build(lm.model, lm.tokenizer.encode(builder("", tools)))

    def run_batch(batch: Sequence[datasets.RestBenchItem]) -> list[dict[str, Any]]:
        started = time.perf_counter()
        results = agent.run_many([item.query for item in batch], prefix=prefix)
        seconds = _share(started, batch)
        records = []
        for item, result in zip(batch, results, strict=True):
            path = [sim.operations[c.name].step for c in result.calls if c.ok and c.name in sim.operations]
            kind, calls = verdicts(
                checker, react_attempts(result.text, result.tokens >= max_new), fuzzy=decoding == "fuzzy"
            )
            records.append(
                _record(
                    item.id,
                    decoding,
                    seconds,
                    question=item.query,
                    prediction=path,
                    gold=list(item.solution),
                    correct=correct_path(path, item.solution),
                    syntax_error=kind,
                    calls=calls,
                    answer=result.answer,
                    tokens_per_tool=per_tool,
                    tokens_per_tool_uncompressed=per_tool_full,
                    generated_tokens=result.tokens,
                    forced_tokens=result.forced_tokens,
                    **_guidance(lm, result.guided, decoding),
                )
            )
        return records

    return Benchmark(
        benchmark,
        data.items,
        data.files,
        run_batch,
        notes=[SIMULATED_NOTE],
        config={"format": "react", "tokens_per_tool_uncompressed": per_tool_full},
    )


def _simulated(sim: RestSimulator, name: str) -> Callable[..., dict[str, Any]]:
    """The executor function of one operation: its simulated response."""
    return lambda **arguments: sim.call(name, arguments)


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
    """A BFCL generation's syntax verdicts (the item's, then one per call) and the calls it made, read as scored.

    The one reading of a recorded BFCL text: the runner scores generations with it and docs/results/rescore.py
    brings stored verdicts to the current checker with it.
    """
    fuzzy = decoding == "fuzzy"
    fmt = call_format("hermes", specs, decoding)
    names = fmt.canonical if isinstance(fmt, Aliased) else {}

    def read(text: str) -> list[ParsedCall]:
        return [replace(c, name=names.get(c.name, c.name)) for c in parse_calls(text)]

    checker = SyntaxChecker(specs, fmt)
    attempts = chat_attempts(text, finish_reason == "length")
    kind, calls = verdicts(checker, attempts, fuzzy=fuzzy, parse=lambda t: read(t)[0])
    made = []
    for attempt in attempts:
        if not attempt.complete:
            continue
        try:
            made += [fuzzy_call(c, specs) if fuzzy else c for c in read(attempt.text)]
        except CallParseError:
            continue
    return kind, calls, made


def _bfcl(
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
        seconds = _share(started, batch)
        return [score(item, gen, seconds) for item, gen in zip(batch, gens, strict=True)]

    def score(item: datasets.BfclItem, gen: Generation, seconds: float) -> dict[str, Any]:
        """Read the calls in one generation and match them against the entry's possible answers."""
        specs = from_openai_tools(item.functions)
        tool_text, _ = _bfcl_tools(specs, compressed)
        full_text, _ = _bfcl_tools(specs, None)
        text = spelled_text(lm.vocab, gen.tokens) if gen.tokens else gen.text  # a replayed record has no tokens
        kind, calls, made = bfcl_calls(specs, text, gen.finish_reason, decoding)
        try:
            verdict = check_entry(data.category, item.functions, made, item.possible_answer)
            correct, why = verdict.valid, verdict.error_type
        except (ValueError, TypeError) as exc:
            correct, why = False, f"unmatchable: {exc}"
        return _record(
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
            **_guidance(lm, guided_steps(gen.extra.get("guided_steps", ())), decoding),
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
