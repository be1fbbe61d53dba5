"""The text (or control token) that switches a sequence from free text into a guided call.

In text mode a trigger may only be completed exactly at the end of a token: tokens that would complete it
and run on (`<mult` when the trigger is `<`) are banned, so the whole call after the trigger is guided.
With tool_choice "none" the trigger cannot be written at all.
"""

from __future__ import annotations

import weakref
from functools import cached_property

import numpy as np

from tooldec.vocab import Vocabulary

_TRIGGERS: weakref.WeakKeyDictionary[Vocabulary, dict[str | int, Trigger]] = weakref.WeakKeyDictionary()


class Trigger:
    """A trigger over one vocabulary: a text like `<tool_call>` or a control token id like `[TOOL_CALLS]`."""

    @classmethod
    def of(cls, vocab: Vocabulary, trigger: str | int) -> Trigger:
        """The shared Trigger of `trigger` over `vocab`: its masks scan the vocabulary once, not once per sequence."""
        per_vocab = _TRIGGERS.setdefault(vocab, {})
        got = per_vocab.get(trigger)
        if got is None:
            got = per_vocab[trigger] = cls(vocab, trigger)
        return got

    def __init__(self, vocab: Vocabulary, trigger: str | int) -> None:
        """Check the trigger exists in this vocabulary; masks are built on first use."""
        self.vocab = vocab
        self.token_id: int | None = None
        self.text: bytes = b""
        if isinstance(trigger, int):
            if not 0 <= trigger < vocab.size:
                raise ValueError(f"trigger token {trigger} is outside the vocabulary")
            self.token_id = trigger
        else:
            if not trigger:
                raise ValueError("an empty trigger")
            special = vocab.special_ids.get(trigger)
            if special is not None:
                self.token_id = special
            else:
                self.text = trigger.encode()

    def tokens(self) -> list[int]:
        """The tokens that write the trigger when it is forced: its control token, or its text's tokens."""
        return [self.token_id] if self.token_id is not None else self.vocab.encode(self.text)

    @property
    def length(self) -> int:
        """Bytes of text to keep as the tail when watching for the trigger."""
        return len(self.text)

    @cached_property
    def _lengths(self) -> np.ndarray:
        return np.array([len(b) if b else 0 for b in self.vocab.token_bytes], dtype=np.int64)

    @cached_property
    def _inside(self) -> np.ndarray:
        """Tokens holding the whole trigger with bytes after it."""
        t = self.text
        return np.array([bool(b) and t in b[:-1] for b in self.vocab.token_bytes], dtype=bool)

    @cached_property
    def _at_end(self) -> np.ndarray:
        """Tokens ending with the whole trigger."""
        t = self.text
        return np.array([bool(b) and b.endswith(t) for b in self.vocab.token_bytes], dtype=bool)

    def _starting(self, rest: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Tokens that start with `rest` and run on, and tokens equal to `rest`."""
        cache = self.__dict__.setdefault("_rest_cache", {})
        got = cache.get(rest)
        if got is None:
            starts = np.array([bool(b) and b.startswith(rest) for b in self.vocab.token_bytes], dtype=bool)
            equal = starts & (self._lengths == len(rest))
            got = cache[rest] = (starts & ~equal, equal)
        return got

    def banned(self, tail: bytes, *, allow: bool) -> np.ndarray | None:
        """Tokens that may not follow `tail` in text mode: the trigger may only end at a token's end (allow),
        or not appear at all (not allow). None when nothing is banned."""
        if self.token_id is not None:
            if allow:
                return None
            mask = np.zeros(self.vocab.size, dtype=bool)
            mask[self.token_id] = True
            return mask
        mask = self._inside.copy()
        if not allow:
            mask |= self._at_end
        t = self.text
        for k in range(1, len(t)):
            if tail.endswith(t[:k]):
                run_on, equal = self._starting(t[k:])
                mask |= run_on
                if not allow:
                    mask |= equal
        return mask

    def fired(self, tail: bytes, token_id: int) -> bool:
        """Whether `token_id`, written after `tail`, completes the trigger (at its end)."""
        if self.token_id is not None:
            return token_id == self.token_id
        token = self.vocab.token_bytes[token_id]
        return bool(token) and (tail + token).endswith(self.text)
