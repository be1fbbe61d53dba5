"""outlines-core: its Vocabulary from token bytes, build_regex_from_schema, Index (all states up front), Guide."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tooldec.bench.engines.base import Engine, bit_set, mask_words
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


class OutlinesEngine(Engine):
    """outlines-core's regex of the call schema (whitespace `" ?"`), indexed over the whole vocabulary."""

    name = "outlines-core"
    modules = ("outlines_core", "outlines_core.json_schema")
    package = "outlines-core"

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

    def start(self, compiled: Any) -> OutlinesSession:
        """A fresh Guide."""
        return OutlinesSession(compiled, self.size, self.eos_id)
