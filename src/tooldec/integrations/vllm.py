"""tooldec inside vLLM's V1 engine: every request that carries tools gets guided calls, in `auto` mode too.

Two pieces, both loaded by vLLM itself:

- `ToolDecLogitsProcessor`, a V1 logits processor (`vllm.v1.sample.logits_processor.LogitsProcessor`) that
  vLLM loads from the `vllm.logits_processors` entry point of an installed tooldec (or from
  `--logits-processors tooldec.integrations.vllm:ToolDecLogitsProcessor`). It keeps one tooldec policy per
  batch row (`tooldec.integrations.batch.PolicyBatch`); requests without a tooldec payload are left alone.
- `ToolDecToolParser`, a tool-call parser registered as `tooldec` (`--tool-parser-plugin
  tooldec.integrations.vllm --tool-call-parser tooldec --enable-auto-tool-choice`). Its `adjust_request` copies
  the Chat Completions request's own `tools`, `tool_choice` and `parallel_tool_calls` into the request's
  `vllm_xargs` as the tooldec payload, so a plain OpenAI client request is guided; it turns vLLM's own
  constraints off for these requests (no xgrammar structural tag, no JSON-list format for `required` or a named
  function: the calls come in the model's own syntax and are parsed like `auto`). It reads the Hermes calls the
  processor guides, in `<tool_call>` tags, a Markdown ```` ```json ```` block or a bare object, and names a call
  that used a tool's unique suffix (`with_aliases`) by the tool's own name, streamed or not.

Without the parser, a client may send the payload itself: `vllm_xargs=tool_payload(tools, tool_choice)` in the
request body, or `SamplingParams(extra_args=tool_payload(...))` with the offline `LLM`. A whole answer guided by
a Lark or GBNF grammar is asked the same way, with `grammar_payload(text)` (`{"tooldec_grammar": text}`), and one
guided by a JSON Schema, a regex or a choice with `output_payload("json" | "regex" | "choice", value)`
(`{"tooldec_json": "<schema JSON>"}`, `{"tooldec_regex": pattern}`, `{"tooldec_choice": [...]}`).

This module imports vLLM; `import tooldec` never imports it.
"""

from __future__ import annotations

import functools
import json
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from vllm.entrypoints.generate.base.protocol import (
    DeltaMessage,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.logger import init_logger
from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from tooldec.chat.reader import call_blocks, calls_in_json, distinct_blocks, opening_overlap
from tooldec.grammar.calls import CallParseError, name_aliases
from tooldec.integrations.batch import (
    PAYLOAD_KEY,
    GrammarRequest,
    OutputRequest,
    PolicyBatch,
    PolicyFactory,
    ToolRequest,
    check_compiles,
    check_grammar,
    grammar_payload,
    output_payload,
    tool_payload,
)
from tooldec.structured import check_output

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

__all__ = ["ToolDecLogitsProcessor", "ToolDecToolParser", "grammar_payload", "output_payload", "tool_payload"]

log = init_logger("vllm.tooldec")  # vLLM's log configuration covers its own namespace

SYNTAX_ENV = "TOOLDEC_VLLM_SYNTAX"
"""Environment variable naming the model's call syntax (hermes, llama31, mistral) when its chat template is
not enough to tell (e.g. a server-side --chat-template)."""

LAYOUT_ENV = "TOOLDEC_VLLM_LAYOUT"
"""Environment variable naming how guided calls may be laid out when a request does not say: compact (the
default) or lines (pretty-printed JSON too, as Qwen2.5-Coder writes it; Hermes syntax only)."""

_ACTIVE: weakref.WeakValueDictionary[int, ToolDecLogitsProcessor] = weakref.WeakValueDictionary()
"""The working processor per engine config: loaded twice (entry point and --logits-processors), the second
copy stays passive instead of masking every row twice."""


def _load_tokenizer(model_config: Any) -> Any:
    """The model's Hugging Face tokenizer, as vLLM's config names it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        model_config.tokenizer,
        revision=getattr(model_config, "tokenizer_revision", None),
        trust_remote_code=bool(getattr(model_config, "trust_remote_code", False)),
    )


class ToolDecLogitsProcessor(LogitsProcessor):
    """Masks the logits of every request carrying a tooldec payload (tools, a grammar, a schema, a regex or a
    choice) to the tokens its policy allows."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Refuse a malformed payload before the request runs (vLLM answers HTTP 400 with the message): bad
        JSON, bad tools, an unknown named tool, a schema tooldec cannot enforce (its path), a grammar that cannot
        be read (its line and column) or guided, a regex it refuses, an empty choice."""
        extra = sampling_params.extra_args
        output = OutputRequest.from_extra_args(extra)
        if output is not None:
            check_output(output.output)
            return
        grammar = GrammarRequest.from_extra_args(extra)
        if grammar is not None:
            check_grammar(grammar.text, grammar.syntax)
            return
        if not extra or PAYLOAD_KEY not in extra:
            return
        ToolRequest.from_extra_args(extra)  # refuses a payload that is not a JSON string
        syntax, layout = os.environ.get(SYNTAX_ENV) or "hermes", os.environ.get(LAYOUT_ENV) or "compact"
        check_compiles(extra[PAYLOAD_KEY], syntax, layout)

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        """Prepare the model's vocabulary once (the tokenizer, the token trie, the trigger masks on first use)."""
        self.batch: PolicyBatch | None = None
        key = id(vllm_config)
        if key in _ACTIVE:
            log.info("tooldec: logits processor loaded twice (entry point and --logits-processors); one is passive")
            return
        model_config = vllm_config.model_config
        try:
            tokenizer = _load_tokenizer(model_config)
            factory = PolicyFactory.from_hf(
                tokenizer, vocab_size=model_config.get_vocab_size(), syntax=os.environ.get(SYNTAX_ENV) or None,
                layout=os.environ.get(LAYOUT_ENV) or "compact",
            )
        except Exception as exc:  # noqa: BLE001 -- installed as a plugin, it must not stop vLLM for other models
            log.error("tooldec: no tool guidance for %s: %s", model_config.tokenizer, exc)
            return
        self.batch = PolicyBatch(factory, logger=log)
        _ACTIVE[key] = self
        log.info("tooldec: tool guidance ready (%s syntax, %s layout, %d tokens)", factory.syntax, factory.layout,
                 factory.prepared.size)

    def is_argmax_invariant(self) -> bool:
        """Masking changes the argmax: greedy requests need the processor too."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the batch: removed, then added, then moved rows."""
        if batch_update is not None and self.batch is not None:
            self.batch.update(batch_update.removed, batch_update.added, batch_update.moved)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Feed each guided row its new tokens, fill all masks in one call, apply them in place."""
        if self.batch is None:
            return logits
        return self.batch.apply(logits)


@functools.lru_cache(maxsize=256)
def _aliases(names: tuple[str, ...]) -> dict[str, str]:
    """Alias -> tool name for a request's tool names (the table the processor compiled its calls with)."""
    return name_aliases(names)


def _canonical(request: Any) -> dict[str, str]:
    """Alias -> tool name of a request's tools (empty without tools)."""
    return _aliases(tuple(t.function.name for t in getattr(request, "tools", None) or ()))


class ToolDecToolParser(Hermes2ProToolParser):
    """Hermes calls guided by tooldec, in `<tool_call>` tags, a ```` ```json ```` block or bare: the request's tools
    go to the logits processor, and the calls come back under the tools' own names.

    `adjust_request` writes the tooldec payload into `vllm_xargs` from the request's `tools`, `tool_choice` and
    `parallel_tool_calls`; vLLM's own constraints stay off (tooldec's are complete), and required or named
    calls are parsed like auto ones. Streaming reuses the Hermes parser's diffing over `call_blocks`."""

    structural_tag_model = None
    supports_required_and_named = False
    syntax = "hermes"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The Hermes parser's state, and the alias table of the request being streamed (set per call)."""
        super().__init__(*args, **kwargs)
        self._names: dict[str, str] = {}

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        """The complete calls of a whole answer, and the content before the first one."""
        names = _canonical(request)
        calls = []
        blocks = [b for b in distinct_blocks(call_blocks(model_output), names) if b.complete]
        for block in blocks:
            try:
                parsed = calls_in_json(block.json)
            except CallParseError:
                continue
            calls += [ToolCall(type="function", function=FunctionCall(
                name=names.get(c.name, c.name), arguments=json.dumps(c.arguments, ensure_ascii=False))) for c in parsed]
        if not calls:
            return ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=model_output)
        content = model_output[: blocks[0].start]
        return ExtractedToolCallInformation(tools_called=True, tool_calls=calls, content=content or None)

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> DeltaMessage | None:
        """The Hermes parser's streaming, over both call shapes and with the tools' own names."""
        self._names = _canonical(request)
        return super().extract_tool_calls_streaming(
            previous_text, current_text, delta_text, previous_token_ids, current_token_ids, delta_token_ids, request
        )

    def _extract_content(self, current_text: str) -> str | None:
        """Content before the first call not sent yet, holding back what could begin an opening."""
        blocks = call_blocks(current_text)
        sendable = blocks[0].start if blocks else len(current_text) - opening_overlap(current_text)
        if sendable > self._sent_content_idx:
            content = current_text[self._sent_content_idx : sendable]
            self._sent_content_idx = sendable
            return content
        return None

    def _extract_tool_call_jsons(self, text: str) -> list[tuple[str, bool]]:
        """(JSON object so far, complete) of every call, in either shape, but repeats (`distinct_blocks`)."""
        return [(b.json, b.complete) for b in distinct_blocks(call_blocks(text), self._names)]

    def _extract_tool_name(self, tc_json: str) -> str | None:  # type: ignore[override]
        """The call's tool name once written whole, an alias replaced by the tool's name."""
        name = super()._extract_tool_name(tc_json)
        return None if name is None else self._names.get(name, name)

    def adjust_request(self, request: Any) -> Any:
        """Attach the payload to a Chat Completions request that carries tools (tool_choice other than none)."""
        if not isinstance(request, ChatCompletionRequest) or not request.tools or request.tool_choice == "none":
            return request
        choice = request.tool_choice
        if hasattr(choice, "model_dump"):
            choice = choice.model_dump(exclude_none=True)
        xargs = dict(request.vllm_xargs or {})
        xargs.update(
            tool_payload(
                [tool.model_dump(exclude_none=True) for tool in request.tools],
                choice if choice is not None else "auto",
                parallel_tool_calls=request.parallel_tool_calls,
                syntax=self.syntax,
            )
        )
        request.vllm_xargs = xargs
        request.skip_special_tokens = False  # a model whose <tool_call> is a special token must still show it
        return request


ToolParserManager.register_module("tooldec", module=ToolDecToolParser)
