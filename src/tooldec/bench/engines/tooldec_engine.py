"""tooldec itself through its public API: Vocabulary, Compiler.compile(cache off), Guide.fill_bitmask/advance."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tooldec.bench.engines.base import Engine, bit_set, mask_words
from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.errors import TokenRejectedError
from tooldec.specs import ToolSet
from tooldec.vocab import Vocabulary


class TooldecSession:
    """A tooldec guide with its mask row."""

    def __init__(self, grammar: CompiledGrammar, size: int) -> None:
        self.guide = grammar.guide()
        self.mask = np.zeros((1, mask_words(size)), dtype=np.int32)

    def fill_mask(self) -> None:
        """Copy the current state's packed mask into the row."""
        self.guide.fill_bitmask(self.mask)

    def allowed(self, token_id: int) -> bool:
        """Whether the last mask allows `token_id`."""
        return bit_set(self.mask, token_id)

    def advance(self, token_id: int) -> bool:
        """Advance the guide; False if it rejects the token."""
        try:
            self.guide.advance(token_id)
        except TokenRejectedError:
            return False
        return True


class TooldecEngine(Engine):
    """tooldec (the JSON call format, the grammar the peers get as a JSON Schema)."""

    name = "tooldec"
    package = "tooldec"

    def __init__(self, tokenizer_dir: Path, vocab: Vocabulary, eos_id: int) -> None:
        """Build tooldec's Vocabulary from the tokenizer file (its whole one-time preparation)."""
        self.vocab = Vocabulary.from_file(tokenizer_dir)
        self.compiler = Compiler(self.vocab)

    def compile(self, tools: ToolSet) -> CompiledGrammar:
        """Compile without the process-wide grammar cache."""
        return self.compiler.compile(tools, "json", use_cache=False)

    def start(self, compiled: CompiledGrammar) -> TooldecSession:
        """A fresh guide."""
        return TooldecSession(compiled, self.vocab.size)
