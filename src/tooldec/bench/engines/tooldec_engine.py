"""tooldec itself through its public API: Vocabulary, Compiler.compile(cache off), Compiler.compile_grammar
(Lark) or Compiler.compile_schema (MaskBench), the guide's fill_bitmask/advance; the batch path is the one decoding uses: a CallController per row (a guide per
row for grammars), `fill_bitmasks` and `apply_token_bitmask_inplace`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tooldec.bench.engines.base import BatchDriver, Engine, bit_set, mask_words
from tooldec.cfg_guide import CfgGuide, CompiledCfg
from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.errors import TokenRejectedError
from tooldec.grammar.schema import clear_caches
from tooldec.guide import Guide
from tooldec.specs import ToolSet
from tooldec.vocab import Vocabulary


class TooldecSession:
    """A tooldec guide with its mask row."""

    def __init__(self, grammar: CompiledGrammar | CompiledCfg, size: int) -> None:
        self.guide: Guide | CfgGuide = grammar.guide()
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


class TooldecBatch(BatchDriver):
    """What `Decoder` and `ToolDecLogitsProcessor` do per step: one `fill_bitmasks` call over the rows'
    CallControllers (a guided call, or a compiled grammar's sentence, from the first token), the compiled apply,
    `accept_token` per row."""

    methods: ClassVar[dict[str, str]] = {
        "row": "tooldec.decoding.CallController(compiled) (a call, or a grammar's sentence, from the first token)",
        "fill": "tooldec.decoding.fill_bitmasks(controllers, bitmask, threads=T) (one core call)",
        "apply": "tooldec.decoding.sampling.apply_token_bitmask_inplace (compiled core kernel)",
        "advance": "CallController.accept_token per row",
    }

    def row(self, compiled: CompiledGrammar | CompiledCfg) -> Any:
        """A controller guiding from its first token (a tool set's call, or a compiled grammar's sentence)."""
        from tooldec.decoding import CallController

        return CallController(compiled)

    def bitmask(self, batch: int) -> np.ndarray:
        """A numpy `int32[B, W]` (what the decoder allocates)."""
        return np.zeros((batch, self.words), dtype=np.int32)

    def fill(self, rows: list[Any], bitmask: np.ndarray) -> None:
        """All rows in one call of the core."""
        from tooldec.decoding import fill_bitmasks

        fill_bitmasks(rows, bitmask, threads=self.threads)

    def apply(self, logits: Any, bitmask: np.ndarray) -> None:
        """The compiled apply kernel (float32 CPU logits)."""
        from tooldec.decoding.sampling import apply_token_bitmask_inplace

        apply_token_bitmask_inplace(logits, bitmask)

    def advance(self, rows: list[Any], tokens: list[int]) -> list[bool]:
        """accept_token per controller (False on TokenRejectedError)."""
        out = []
        for ctrl, token in zip(rows, tokens, strict=True):
            try:
                ctrl.accept_token(token)
                out.append(True)
            except TokenRejectedError:
                out.append(False)
        return out


class TooldecEngine(Engine):
    """tooldec (the JSON call format, the grammar the peers get as a JSON Schema)."""

    name = "tooldec"
    package = "tooldec"
    batch_driver = TooldecBatch

    precompute: ClassVar[bool] = False
    """Whether a compile indexes every state up front (`Compiler.compile(precompute=True)`)."""

    def __init__(self, tokenizer_dir: Path, vocab: Vocabulary, eos_id: int) -> None:
        """Build tooldec's Vocabulary from the tokenizer file (its whole one-time preparation)."""
        self.vocab = Vocabulary.from_file(tokenizer_dir)
        self.compiler = Compiler(self.vocab)

    def compile(self, tools: ToolSet) -> CompiledGrammar:
        """Compile cold: without the compiler's caches, and from empty grammar caches (number ranges, key languages)."""
        clear_caches()
        return self.compiler.compile(tools, "json", use_cache=False, precompute=self.precompute)

    def compile_grammar(self, grammar: str) -> Any:
        """compile_grammar(syntax="lark") with the compiler's cache off (cold, and nothing of an earlier round freed
        inside the timed compile)."""
        return self.compiler.compile_grammar(grammar, syntax="lark", use_cache=False)

    def compile_schema(self, schema: Any) -> CompiledGrammar | CompiledCfg:
        """Compiler.compile_schema, what decoding a `response_format` runs (a DFA or a pushdown guide), cold: the
        compiler's cache off and the grammar caches emptied first; EmptyGrammarError when no value satisfies it."""
        clear_caches()
        return self.compiler.compile_schema(schema, use_cache=False, precompute=self.precompute)

    def start(self, compiled: CompiledGrammar | CompiledCfg) -> TooldecSession:
        """A fresh guide."""
        return TooldecSession(compiled, self.vocab.size)

    def batch(self, threads: int) -> TooldecBatch:
        """The decoding path's batch fill and apply."""
        return TooldecBatch(self.vocab.size, threads)


class TooldecPrecomputeEngine(TooldecEngine):
    """tooldec with every state indexed at compile time (Outlines-style, all up front), against its lazy default."""

    name = "tooldec-precompute"
    precompute = True

    @classmethod
    def grammar_missing(cls) -> str | None:
        """Always a reason: the CFG API has no precompute option, so this row would repeat tooldec's."""
        return "the CFG API has no precompute option (see the tooldec row)"
