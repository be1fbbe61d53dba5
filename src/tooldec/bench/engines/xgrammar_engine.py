"""xgrammar: TokenizerInfo from a transformers fast tokenizer, GrammarCompiler without cache, GrammarMatcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tooldec.bench.engines.base import BatchDriver, Engine, bit_set, mask_words
from tooldec.bench.schema import call_schema
from tooldec.specs import ToolSet
from tooldec.vocab import Vocabulary


class XGrammarSession:
    """A GrammarMatcher with its mask row."""

    def __init__(self, compiled: Any, size: int) -> None:
        import xgrammar

        self.matcher = xgrammar.GrammarMatcher(compiled)
        self.mask = np.zeros((1, mask_words(size)), dtype=np.int32)

    def fill_mask(self) -> None:
        """fill_next_token_bitmask into the row."""
        self.matcher.fill_next_token_bitmask(self.mask)

    def allowed(self, token_id: int) -> bool:
        """Whether the last mask allows `token_id`."""
        return bit_set(self.mask, token_id)

    def advance(self, token_id: int) -> bool:
        """accept_token."""
        return bool(self.matcher.accept_token(token_id))


class XGrammarBatch(BatchDriver):
    """xgrammar's batch API: BatchGrammarMatcher over GrammarMatchers, its CPU apply kernel."""

    methods: ClassVar[dict[str, str]] = {
        "row": "xgrammar.GrammarMatcher(compiled)",
        "fill": "xgrammar.BatchGrammarMatcher(max_threads=T).batch_fill_next_token_bitmask(matchers, bitmask)",
        "apply": "xgrammar.apply_token_bitmask_inplace (backend auto: its CPU kernel)",
        "advance": "xgrammar.BatchGrammarMatcher.batch_accept_token(matchers, tokens)",
    }

    def __init__(self, size: int, threads: int) -> None:
        import xgrammar

        super().__init__(size, threads)
        self.xgr = xgrammar
        self.matcher = xgrammar.BatchGrammarMatcher(max_threads=threads)

    def row(self, compiled: Any) -> Any:
        """A fresh GrammarMatcher."""
        return self.xgr.GrammarMatcher(compiled)

    def bitmask(self, batch: int) -> Any:
        """xgrammar.allocate_token_bitmask (a torch int32 tensor)."""
        return self.xgr.allocate_token_bitmask(batch, self.size)

    def fill(self, rows: list[Any], bitmask: Any) -> None:
        """batch_fill_next_token_bitmask (rows 0..B-1)."""
        self.matcher.batch_fill_next_token_bitmask(rows, bitmask)

    def apply(self, logits: Any, bitmask: Any) -> None:
        """xgrammar's apply (CPU kernel for CPU tensors)."""
        self.xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=self.size)

    def advance(self, rows: list[Any], tokens: list[int]) -> list[bool]:
        """batch_accept_token."""
        return list(self.xgr.BatchGrammarMatcher.batch_accept_token(rows, tokens))


class XGrammarEngine(Engine):
    """xgrammar's JSON Schema grammar, no whitespace freedom, separators `", "` and `": "`, strict objects."""

    name = "xgrammar"
    modules = ("xgrammar", "transformers")
    package = "xgrammar"
    batch_driver = XGrammarBatch

    def __init__(self, tokenizer_dir: Path, vocab: Vocabulary, eos_id: int) -> None:
        """Load the tokenizer in transformers and build xgrammar's TokenizerInfo and compiler."""
        import xgrammar
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_dir / "tokenizer.json"))
        info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=vocab.size, stop_token_ids=[eos_id])
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.size = vocab.size

    def compile(self, tools: ToolSet) -> Any:
        """compile_json_schema of the call schema."""
        return self.compiler.compile_json_schema(
            call_schema(tools), any_whitespace=False, separators=(", ", ": "), strict_mode=True
        )

    def compile_grammar(self, grammar: str) -> Any:
        """compile_lark: xgrammar's own Lark front end (no conversion to its EBNF)."""
        return self.compiler.compile_lark(grammar)

    def compile_schema(self, schema: Any) -> Any:
        """compile_json_schema with tooldec's separators, no free whitespace, objects open unless closed
        (strict_mode off: JSON Schema's reading)."""
        return self.compiler.compile_json_schema(schema, any_whitespace=False, separators=(", ", ": "),
                                                 strict_mode=False)

    def start(self, compiled: Any) -> XGrammarSession:
        """A fresh matcher."""
        return XGrammarSession(compiled, self.size)

    def batch(self, threads: int) -> XGrammarBatch:
        """BatchGrammarMatcher with `threads` threads."""
        return XGrammarBatch(self.size, threads)
