"""outlines-core: its Vocabulary from token bytes, build_regex_from_schema, Index (all states up front), Guide."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tooldec.bench.engines.base import BatchDriver, Engine, bit_set, mask_words
from tooldec.bench.schema import call_schema
from tooldec.specs import ToolSet
from tooldec.vocab import Vocabulary

WHITESPACE = " ?"
"""Optional single spaces: the narrowest outlines-core whitespace that admits `", "` and `": "`."""


class OutlinesSession:
    """An outlines-core Guide with its mask row."""

    def __init__(self, index: Any, size: int, eos_id: int) -> None:
        import outlines_core

        self.guide = outlines_core.Guide(index)
        self.eos_id = eos_id
        self.mask = np.zeros(mask_words(size), dtype=np.int32)

    def fill_mask(self) -> None:
        """write_mask_into the row."""
        self.guide.write_mask_into(self.mask.ctypes.data, self.mask.size, 4)

    def allowed(self, token_id: int) -> bool:
        """Whether the last mask allows `token_id`."""
        return bit_set(self.mask, token_id)

    def advance(self, token_id: int) -> bool:
        """advance without returning the token list; EOS in a final state ends the call."""
        if token_id == self.eos_id and self.guide.is_finished():
            return True
        try:
            self.guide.advance(token_id, return_tokens=False)
        except ValueError:
            return False
        return True


class OutlinesBatch(BatchDriver):
    """outlines-core has no batch fill: write_mask_into per row of one tensor, then its torch apply kernel."""

    methods: ClassVar[dict[str, str]] = {
        "row": "outlines_core.Guide(index)",
        "fill": "Guide.write_mask_into(row pointer, W, 4) per row (no batch API)",
        "apply": "outlines_core.kernels.torch.apply_token_bitmask_inplace (torch.compile'd; compiled before timing)",
        "advance": "Guide.advance(token, return_tokens=False) per row (EOS in a final state ends the call)",
    }

    def __init__(self, size: int, threads: int, eos_id: int) -> None:
        import outlines_core
        import outlines_core.kernels.torch

        super().__init__(size, threads)
        self.oc = outlines_core
        self.kernels = outlines_core.kernels.torch
        self.eos_id = eos_id

    def row(self, compiled: Any) -> Any:
        """A fresh Guide."""
        return self.oc.Guide(compiled)

    def bitmask(self, batch: int) -> Any:
        """A torch int32 tensor `[B, W]`."""
        import torch

        return torch.zeros((batch, self.words), dtype=torch.int32)

    def fill(self, rows: list[Any], bitmask: Any) -> None:
        """write_mask_into each row's slice of the tensor."""
        base, words = bitmask.data_ptr(), self.words
        step = words * 4
        for i, guide in enumerate(rows):
            guide.write_mask_into(base + i * step, words, 4)

    def apply(self, logits: Any, bitmask: Any) -> None:
        """outlines-core's torch apply kernel."""
        self.kernels.apply_token_bitmask_inplace(logits, bitmask)

    def advance(self, rows: list[Any], tokens: list[int]) -> list[bool]:
        """advance per Guide; EOS in a final state is accepted without advancing."""
        out = []
        for guide, token in zip(rows, tokens, strict=True):
            if token == self.eos_id and guide.is_finished():
                out.append(True)
                continue
            try:
                guide.advance(token, return_tokens=False)
                out.append(True)
            except ValueError:
                out.append(False)
        return out


class OutlinesEngine(Engine):
    """outlines-core's regex of the call schema (whitespace `" ?"`), indexed over the whole vocabulary."""

    name = "outlines-core"
    modules = ("outlines_core", "outlines_core.json_schema")
    package = "outlines-core"
    batch_driver = OutlinesBatch

    def __init__(self, tokenizer_dir: Path, vocab: Vocabulary, eos_id: int) -> None:
        """Decode the tokenizer to token bytes (tooldec's Vocabulary) and build outlines-core's Vocabulary."""
        import outlines_core

        own = Vocabulary.from_file(tokenizer_dir)
        by_bytes: dict[bytes, list[int]] = {}
        for token_id, token in enumerate(own.token_bytes):
            if token is not None and token_id != eos_id:
                by_bytes.setdefault(token, []).append(token_id)
        self.vocabulary = outlines_core.Vocabulary(eos_id, by_bytes)
        self.size = vocab.size
        self.eos_id = eos_id

    def compile(self, tools: ToolSet) -> Any:
        """build_regex_from_schema, then the Index over the vocabulary."""
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        regex = build_regex_from_schema(json.dumps(call_schema(tools)), whitespace_pattern=WHITESPACE)
        return outlines_core.Index(regex, self.vocabulary)

    def compile_schema(self, schema: Any) -> Any:
        """build_regex_from_schema (whitespace `" ?"`), then the Index over the vocabulary."""
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern=WHITESPACE)
        return outlines_core.Index(regex, self.vocabulary)

    def compile_grammar(self, grammar: str) -> Any:
        """Always NotImplementedError: outlines-core has no CFG engine (outlines hands CFGs to the other peers)."""
        raise NotImplementedError("outlines-core has no context-free grammar engine (outlines' CFG backends are "
                                  "llguidance and xgrammar)")

    def start(self, compiled: Any) -> OutlinesSession:
        """A fresh Guide."""
        return OutlinesSession(compiled, self.size, self.eos_id)

    def batch(self, threads: int) -> OutlinesBatch:
        """The per-row fill loop (threads: only the apply's torch threads)."""
        return OutlinesBatch(self.size, threads, self.eos_id)
