"""What every benchmark runner shares: the prepared `Benchmark`, the decoding modes, the fuzzy baseline's executor
and the fields of an item's record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tooldec.agents.executor import ToolExecutor, ToolResult
from tooldec.agents.explain import summarize
from tooldec.backends.loader import LoadedModel
from tooldec.decoding.decoder import Generation
from tooldec.errors import ToolDecError
from tooldec.eval.metrics import fuzzy_call
from tooldec.grammar.calls import ParsedCall

Decoding = Literal["tooldec", "free", "fuzzy"]
DECODINGS: tuple[str, ...] = ("tooldec", "free", "fuzzy")


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


def spelled_text(vocab: Any, tokens: Sequence[int]) -> str:
    """A generation's text with its control tokens but EOS written by name: a `<tool_call>` that is one special
    token of the tokenizer is part of the call the record scores (`Generation.text` leaves it out)."""
    names = {v: k for k, v in vocab.special_ids.items()}
    parts = [vocab.token_bytes[t] or names.get(t, "").encode() for t in tokens if t not in vocab.eos_ids]
    return b"".join(parts).decode("utf-8", errors="replace")


def guidance_field(lm: LoadedModel, steps: Sequence[Any], decoding: str) -> dict[str, Any]:
    """A ToolDec record's `guidance` field: the mass its masks removed and where they overrode the model."""
    return {"guidance": summarize(steps, lm.vocab)} if decoding == "tooldec" else {}


def item_record(item_id: str, decoding: str, seconds: float, **fields: Any) -> dict[str, Any]:
    """A record with the common fields; `seconds` is the item's share of its batch's wall time."""
    return {"id": item_id, "decoding": decoding, **fields, "seconds": round(seconds, 3)}


def batch_share(started: float, batch: Sequence[Any]) -> float:
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
