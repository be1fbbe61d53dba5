"""RestBench: a ReAct plan over a scenario's operations, answered by the local simulator; correct path rate."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tooldec.agents.executor import ToolExecutor
from tooldec.agents.react import FINISH, ReactAgent, describe_tools, react_prompt
from tooldec.backends.loader import LoadedModel
from tooldec.decoding.prefix import PromptPrefix
from tooldec.eval import data as datasets
from tooldec.eval.compress import compressed_block, shortened
from tooldec.eval.metrics import SyntaxChecker, correct_path
from tooldec.eval.restbench_sim import RestSimulator
from tooldec.eval.runners.common import Benchmark, FuzzyExecutor, batch_share, guidance_field, item_record
from tooldec.eval.runners.scoring import call_format, react_attempts, verdicts
from tooldec.specs import ToolSet

SIMULATED_NOTE = (
    "RestBench responses are simulated: a local simulator returns schema-shaped data from the OpenAPI "
    "document (no network); only the plan of calls is scored (correct path rate)."
)


def react_checker(tools: ToolSet, decoding: str) -> SyntaxChecker:
    """The syntax checker of ReAct actions over `tools` and Finish (with ToolDec's name aliases when guided)."""
    acting = ToolSet([*tools, FINISH])
    return SyntaxChecker(acting, call_format("react", acting, decoding))


def prepare_restbench(
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
        seconds = batch_share(started, batch)
        records = []
        for item, result in zip(batch, results, strict=True):
            path = [sim.operations[c.name].step for c in result.calls if c.ok and c.name in sim.operations]
            kind, calls = verdicts(
                checker, react_attempts(result.text, result.tokens >= max_new), fuzzy=decoding == "fuzzy"
            )
            records.append(
                item_record(
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
                    **guidance_field(lm, result.guided, decoding),
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
