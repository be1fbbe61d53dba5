"""The tool set the decoding tests share (FuncQA's math tools and a weather tool with bounded values), and their
checks of guided calls."""

from __future__ import annotations

from typing import Any

import jsonschema

from tooldec.specs import ToolSet, ToolSpec
from tooldec.toolsets import funcqa_tools

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "detailed": {"type": "boolean"},
        },
        "required": ["city"],
    },
)
TOOLS = ToolSet([*funcqa_tools(), WEATHER])


def check_call(call: Any, tools: ToolSet = TOOLS) -> None:
    """The call names a tool and its arguments validate against that tool's schema."""
    assert call.name in tools
    tool = tools[call.name]
    jsonschema.validate(call.bind(tool), tool.parameters)


def check_sampled_calls(model: Any, vocab: Any, fmt: str, seeds: int) -> None:
    """Sampling `model` (temperature 1, seeds 0 to `seeds` - 1) under the grammar of TOOLS in `fmt`, three prompts
    at once: every row stops after exactly one call, and every call is valid."""
    from tooldec.compiler import Compiler
    from tooldec.decoding import CallController, SamplingParams
    from tooldec.decoding.decoder import Decoder

    grammar = Compiler(vocab).compile(TOOLS, fmt)
    decoder = Decoder(model, vocab)
    prompts = [vocab.encode("call a tool:"), vocab.encode("hello"), vocab.encode("x")]
    for seed in range(seeds):
        controllers = [CallController(grammar) for _ in prompts]
        gens = decoder.generate(prompts, controllers, SamplingParams(temperature=1.0, seed=seed), max_new_tokens=400)
        for gen in gens:
            assert gen.finish_reason == "stop", gen.text
            assert len(gen.events) == 1 and gen.events[0].error is None
            for call in gen.events[0].calls:
                check_call(call)
