"""What the runner needs from an engine: preparation per tokenizer, compile per tool set (or Lark grammar), a
session per call."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from tooldec.specs import ToolSet
from tooldec.vocab import Vocabulary


def mask_words(vocab_size: int) -> int:
    """Length of a packed `int32` token mask for `vocab_size` tokens."""
    return (vocab_size + 31) // 32


def bit_set(mask: np.ndarray, token_id: int) -> bool:
    """Whether token `token_id` is allowed in a packed mask (bit `t & 31` of word `t >> 5`)."""
    return bool((int(mask.flat[token_id >> 5]) >> (token_id & 31)) & 1)


class Session(Protocol):
    """One sequence forced through a compiled grammar: the per-token step is `fill_mask` then `advance`."""

    mask: Any
    """The session's packed mask row (an `int32` array of `ceil(V/32)` words, maybe shaped `[1, W]`)."""

    def fill_mask(self) -> None:
        """Compute the mask of the current state into the session's buffer."""

    def allowed(self, token_id: int) -> bool:
        """Whether the last filled mask allows `token_id`."""

    def advance(self, token_id: int) -> bool:
        """Consume `token_id`; False when the engine refuses it."""


class Engine(ABC):
    """An engine prepared for one tokenizer (construction is the one-time preparation that gets timed)."""

    name: ClassVar[str]
    package: ClassVar[str]
    modules: ClassVar[tuple[str, ...]] = ()
    batch_driver: ClassVar[type[BatchDriver] | None] = None
    """The class of `batch()`'s driver (its `methods` go into the report)."""

    @classmethod
    def preload(cls) -> None:
        """Import the engine's modules, so that import time is not counted as tokenizer preparation."""
        for module in cls.modules:
            importlib.import_module(module)

    @classmethod
    def missing(cls) -> str | None:
        """Why the engine cannot run here (its package is not installed), or None."""
        if importlib.util.find_spec(cls.package.replace("-", "_")) is None:
            return f"{cls.package} is not installed (pip install 'tooldec[peers]')"
        return None

    @classmethod
    def version(cls) -> str:
        """The installed version of the engine's package."""
        return importlib.metadata.version(cls.package)

    @abstractmethod
    def __init__(self, tokenizer_dir: Path, vocab: Vocabulary, eos_id: int) -> None:
        """Prepare the engine's tokenizer data for `tokenizer_dir` (vocab: tooldec's view of the same file)."""

    @abstractmethod
    def compile(self, tools: ToolSet) -> Any:
        """Compile the grammar of one call of any tool of `tools`, with every cache off."""

    @abstractmethod
    def start(self, compiled: Any) -> Session:
        """A fresh session at the start of a call."""

    def batch(self, threads: int) -> BatchDriver:
        """The engine's batch path (fill a bitmask of many rows, apply it to logits), on `threads` threads."""
        raise NotImplementedError(f"{self.name} has no batch path")

    @classmethod
    def grammar_missing(cls) -> str | None:
        """Why this installation cannot compile context-free grammars yet (the CFG workloads are then skipped),
        or None."""
        return None

    def compile_grammar(self, grammar: str) -> Any:
        """Compile a Lark grammar through the engine's own front end, every cache off; NotImplementedError where
        the engine has none (the CFG workloads then report it failed, with the reason)."""
        raise NotImplementedError(f"{self.name} has no context-free grammar engine")

    def compile_schema(self, schema: Any) -> Any:
        """Compile one JSON value valid under a JSON Schema document (MaskBench), read as JSON Schema reads it
        (objects open unless closed), every cache off; any exception is the engine refusing the schema."""
        raise NotImplementedError(f"{self.name} has no JSON Schema compile")



class BatchDriver(ABC):
    """An engine's own batch API: per-sequence row objects, one fill of an `int32[B, W]` bitmask for all rows,
    its logits apply, and the advance of every row by one token. `methods` says which calls each step is."""

    methods: ClassVar[dict[str, str]] = {}
    """What `fill`, `apply` and `advance` call (for the report)."""

    def __init__(self, size: int, threads: int) -> None:
        self.size = size
        self.words = mask_words(size)
        self.threads = threads

    @abstractmethod
    def row(self, compiled: Any) -> Any:
        """A fresh sequence at the start of a call (the object the batch API takes per row)."""

    @abstractmethod
    def bitmask(self, batch: int) -> Any:
        """A bitmask of `batch` rows in the engine's own type (numpy array or torch tensor)."""

    @abstractmethod
    def fill(self, rows: list[Any], bitmask: Any) -> None:
        """Fill row i of `bitmask` with the mask of `rows[i]`, through the engine's batch call."""

    @abstractmethod
    def apply(self, logits: Any, bitmask: Any) -> None:
        """Set the logits of disallowed tokens to -inf in place (`logits`: float32 torch tensor `[B, V]`)."""

    @abstractmethod
    def advance(self, rows: list[Any], tokens: list[int]) -> list[bool]:
        """Consume `tokens[i]` in `rows[i]`; False where the engine refuses it."""

    def warm(self, logits: Any, bitmask: Any) -> None:
        """Anything the apply needs once per shape before it is timed (e.g. torch.compile)."""
        self.apply(logits, bitmask)

    @staticmethod
    def as_numpy(bitmask: Any) -> np.ndarray:
        """The bitmask as a numpy `int32[B, W]` view."""
        return bitmask.numpy() if hasattr(bitmask, "numpy") else np.asarray(bitmask)
