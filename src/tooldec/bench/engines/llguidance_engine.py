"""llguidance: LLTokenizer from the tokenizer.json text (what its HF helper does), LLMatcher per grammar."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tooldec.bench.engines.base import BatchDriver, Engine, bit_set, mask_words
from tooldec.bench.schema import call_schema
from tooldec.errors import ToolDecError
from tooldec.specs import ToolSet
from tooldec.vocab import Vocabulary

JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance JsonCompileOptions: no free whitespace, tooldec's separators."""


class LLGuidanceSession:
    """An LLMatcher with its mask row."""

    def __init__(self, matcher: Any, size: int) -> None:
        self.matcher = matcher
        self.mask = np.zeros((1, mask_words(size)), dtype=np.int32)

    def fill_mask(self) -> None:
        """Compute the mask straight into the row."""
        row = self.mask[0]
        self.matcher.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)

    def allowed(self, token_id: int) -> bool:
        """Whether the last mask allows `token_id`."""
        return bit_set(self.mask, token_id)

    def advance(self, token_id: int) -> bool:
        """consume_token (the matcher enters its error state on a refused token)."""
        return bool(self.matcher.consume_token(token_id)) and not self.matcher.is_error()


class LLGuidanceBatch(BatchDriver):
    """llguidance's parallel fill (LLExecutor) over LLMatchers, its torch apply, its parallel consume."""

    methods: ClassVar[dict[str, str]] = {
        "row": "LLMatcher.deep_copy() of the compiled matcher",
        "fill": "llguidance.torch.fill_next_token_bitmask_par(LLExecutor(num_threads=T), [(matcher, i)], bitmask)",
        "apply": "llguidance.torch.apply_token_bitmask_inplace (torch.compile'd; compiled before timing)",
        "advance": "llguidance.torch.consume_token_par(executor, [(matcher, token)])",
    }

    def __init__(self, size: int, threads: int) -> None:
        import llguidance
        import llguidance.torch

        super().__init__(size, threads)
        self.llg = llguidance.torch
        self.executor = llguidance.LLExecutor(num_threads=threads)

    def row(self, compiled: Any) -> Any:
        """A deep copy of the compiled matcher."""
        return compiled.deep_copy()

    def bitmask(self, batch: int) -> Any:
        """llguidance.torch.allocate_token_bitmask (a torch int32 tensor)."""
        return self.llg.allocate_token_bitmask(batch, self.size)

    def fill(self, rows: list[Any], bitmask: Any) -> None:
        """fill_next_token_bitmask_par: matcher i into row i."""
        self.llg.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(rows)], bitmask)

    def apply(self, logits: Any, bitmask: Any) -> None:
        """llguidance's torch apply."""
        self.llg.apply_token_bitmask_inplace(logits, bitmask)

    def advance(self, rows: list[Any], tokens: list[int]) -> list[bool]:
        """consume_token_par (a refused token leaves the matcher in its error state)."""
        done = self.llg.consume_token_par(self.executor, list(zip(rows, tokens, strict=True)))
        return [bool(ok) and not m.is_error() for ok, m in zip(done, rows, strict=True)]


class LLGuidanceEngine(Engine):
    """llguidance's JSON Schema grammar with fixed separators `", "` and `": "` and no free whitespace."""

    name = "llguidance"
    modules = ("llguidance",)
    package = "llguidance"
    batch_driver = LLGuidanceBatch

    def __init__(self, tokenizer_dir: Path, vocab: Vocabulary, eos_id: int) -> None:
        """Build the LLTokenizer (token trie and slices) from the tokenizer.json text."""
        import llguidance

        text = (tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8")
        self.tokenizer = llguidance.LLTokenizer(text, n_vocab=vocab.size, eos_token=eos_id)
        self.size = vocab.size

    def compile(self, tools: ToolSet) -> Any:
        """grammar_from_json_schema, then the LLMatcher that compiles it (a spare, deep-copied per session)."""
        import llguidance

        grammar = llguidance.LLMatcher.grammar_from_json_schema(call_schema(tools), defaults=JSON_OPTIONS)
        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ToolDecError(f"llguidance: {matcher.get_error()}")
        return matcher

    def compile_grammar(self, grammar: str) -> Any:
        """grammar_from_lark (its Lark front end), then the LLMatcher that compiles it."""
        import llguidance

        matcher = llguidance.LLMatcher(self.tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
        if matcher.is_error():
            raise ToolDecError(f"llguidance: {matcher.get_error()}")
        return matcher

    def compile_schema(self, schema: Any) -> Any:
        """grammar_from_json_schema with tooldec's separators and no free whitespace, then the LLMatcher."""
        import llguidance

        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ToolDecError(f"llguidance: {matcher.get_error()}")
        return matcher

    def start(self, compiled: Any) -> LLGuidanceSession:
        """A deep copy of the compiled matcher at its start."""
        return LLGuidanceSession(compiled.deep_copy(), self.size)

    def batch(self, threads: int) -> LLGuidanceBatch:
        """An LLExecutor with `threads` threads."""
        return LLGuidanceBatch(self.size, threads)
