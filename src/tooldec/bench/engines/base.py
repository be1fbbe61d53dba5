"""What the runner needs from an engine: preparation per tokenizer, compile per tool set, a session per call."""

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
