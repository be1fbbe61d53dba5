"""Per-model preparation: one object made once per tokenizer and shared by every tool set and sequence.

It holds what the token index needs of a vocabulary (the token bytes laid out flat and their trie, in the
compiled core, with its cache of region walks and the walks pinned there for good), the EOS ids, the packed-mask
width, and a bounded, thread-safe cache of named packed masks that higher layers build once per model (a
trigger's banned tokens in text mode, "EOS only").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable

import numpy as np

from tooldec import _core
from tooldec.vocab import Vocabulary

MASK_CACHE_SIZE = 256
"""Named masks kept per model (a trigger needs about one per prefix of its text it can follow)."""


def pack_ids(ids: Iterable[int], words: int) -> np.ndarray:
    """Token ids as a packed `int32[words]` mask: token t is bit `t & 31` of word `t >> 5`."""
    bits = np.zeros(words * 32, dtype=bool)
    arr = np.fromiter(ids, dtype=np.int64)
    if arr.size:
        bits[arr] = True
    return np.packbits(bits, bitorder="little").view("<i4")


def pack_bool(mask: np.ndarray, words: int) -> np.ndarray:
    """A boolean mask over token ids (shorter than `words * 32` is padded with False) as packed `int32[words]`."""
    bits = np.zeros(words * 32, dtype=bool)
    bits[: mask.shape[0]] = mask
    return np.packbits(bits, bitorder="little").view("<i4")


def unpack(bitmask: np.ndarray, size: int) -> np.ndarray:
    """A packed `int32[..., W]` mask back to `bool[..., size]`."""
    bits = np.unpackbits(np.ascontiguousarray(bitmask).view(np.uint8), axis=-1, bitorder="little").view(bool)
    return bits[..., :size]


class PreparedVocab:
    """A vocabulary prepared for guidance: its token trie, EOS mask and named-mask cache (make one per model)."""

    def __init__(self, vocab: Vocabulary) -> None:
        """Lay the token bytes out flat and build the trie in the compiled core (a few hundred ms at 128k)."""
        self.vocab = vocab
        tb = vocab.token_bytes
        lens = np.fromiter((len(b) if b else 0 for b in tb), dtype=np.int64, count=len(tb))
        offsets = np.zeros(len(tb) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        flat = np.frombuffer(b"".join(b for b in tb if b), dtype=np.uint8)
        eos = np.array(sorted(vocab.eos_ids), dtype=np.int32)
        self.core = _core.Vocab(flat, offsets, eos, vocab.size)
        self.size = vocab.size
        self.words = (vocab.size + 31) // 32
        self.eos_mask = pack_ids(vocab.eos_ids, self.words)
        self.eos_mask.flags.writeable = False
        self._masks: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._done: set[Hashable] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PreparedVocab(size={self.size}, trie_nodes={self.core.num_nodes})"

    def first_time(self, step: Hashable) -> bool:
        """True the first time `step` is asked for, then False: a one-time preparation a higher layer makes per
        model (the regions a Compiler pins), whichever object asks first."""
        with self._lock:
            if step in self._done:
                return False
            self._done.add(step)
            return True

    def mask(self, key: Hashable, build: Callable[[], np.ndarray]) -> np.ndarray:
        """The named packed mask `key`, built once by `build()` (read-only; the last MASK_CACHE_SIZE are kept)."""
        with self._lock:
            got = self._masks.get(key)
            if got is not None:
                self._masks.move_to_end(key)
                return got
        got = np.ascontiguousarray(build(), dtype=np.int32)
        if got.shape != (self.words,):
            raise ValueError(f"mask {key!r} has shape {got.shape}, not ({self.words},)")
        got.flags.writeable = False
        with self._lock:
            got = self._masks.setdefault(key, got)
            self._masks.move_to_end(key)
            while len(self._masks) > MASK_CACHE_SIZE:
                self._masks.popitem(last=False)
        return got
