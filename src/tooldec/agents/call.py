"""The shortest path from Python functions and a transformers model to one valid call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tooldec.compiler import Compiler
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.grammar.calls import ParsedCall
from tooldec.specs import ToolSet, ToolSpec, from_function
from tooldec.vocab import Vocabulary


def generate_call(
    model: Any,
    tokenizer: Any,
    tools: Sequence[Callable[..., Any] | ToolSpec],
    prompt: str,
    *,
    format: str = "json",
    params: SamplingParams | None = None,
    max_new_tokens: int = 256,
) -> ParsedCall:
    """Decode one call of one of `tools` (functions or specs) after `prompt`; the call is valid by construction.

    The whole continuation is guided, so the result always names an existing tool with arguments that fit
    its schema. Raises ValueError if `max_new_tokens` ends the call early.
    """
    toolset = ToolSet(t if isinstance(t, ToolSpec) else from_function(t) for t in tools)
    vocab = Vocabulary.from_hf(tokenizer, vocab_size=model.get_output_embeddings().weight.shape[0])
    controller = CallController(Compiler(vocab).compile(toolset, format))
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False) or [min(vocab.eos_ids)]
    gen = Decoder(model, vocab).generate(
        [prompt_ids], [controller], params or SamplingParams(), max_new_tokens=max_new_tokens
    )[0]
    if not gen.events or not gen.events[0].calls:
        raise ValueError(f"the call did not finish within {max_new_tokens} tokens: {gen.text!r}")
    return gen.events[0].calls[0]
