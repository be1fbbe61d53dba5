"""The text (or control token) that switches a sequence from free text into a guided call.

In text mode a trigger may only be completed exactly at the end of a token: tokens that would complete it
and run on (`<mult` when the trigger is `<`) are banned, so the whole call after the trigger is guided.
With tool_choice "none" the trigger cannot be written at all. The text-mode masks are packed bitmasks built
once per model and kept in the prepared vocabulary's mask cache.
"""

from __future__ import annotations

import numpy as np

from tooldec.index import PreparedVocab, pack_bool


class Trigger:
    """A trigger over one prepared vocabulary: a text like `<tool_call>` or a control token id like `[TOOL_CALLS]`."""

    def __init__(self, prepared: PreparedVocab, trigger: str | int) -> None:
        """Check the trigger exists in this vocabulary; its masks are built on first use, once per model."""
        self.prepared = prepared
        vocab = prepared.vocab
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
        return [self.token_id] if self.token_id is not None else self.prepared.vocab.encode(self.text)

    @property
    def length(self) -> int:
        """Bytes of text to keep as the tail when watching for the trigger."""
        return len(self.text)

    def allowed_mask(self, tail: bytes, *, allow: bool) -> np.ndarray | None:
        """The packed mask of tokens that may follow `tail` in text mode (None: every token).

        The trigger may only end at a token's end (allow), or not appear at all (not allow)."""
        if self.token_id is not None:
            if allow:
                return None
            return self.prepared.mask(("trigger-ban", self.token_id), self._build_ban)
        t = self.text
        started = tuple(k for k in range(1, len(t)) if tail.endswith(t[:k]))
        return self.prepared.mask(("trigger", t, started, allow), lambda: self._build(started, allow))

    def _build_ban(self) -> np.ndarray:
        """Every token but the control token."""
        keep = np.ones(self.prepared.size, dtype=bool)
        keep[self.token_id] = False
        return pack_bool(keep, self.prepared.words)

    def _build(self, started: tuple[int, ...], allow: bool) -> np.ndarray:
        """Scan the vocabulary once for one (prefix of the trigger already written, allow) combination."""
        t = self.text
        tb = self.prepared.vocab.token_bytes
        banned = np.fromiter(
            (
                bool(b)
                and (
                    t in b[:-1]
                    or (not allow and b.endswith(t))
                    or any(b.startswith(t[k:]) and (not allow or len(b) > len(t) - k) for k in started)
                )
                for b in tb
            ),
            dtype=bool,
            count=len(tb),
        )
        return pack_bool(~banned, self.prepared.words)

    def fired(self, tail: bytes, token_id: int) -> bool:
        """Whether `token_id`, written after `tail`, completes the trigger (at its end)."""
        if self.token_id is not None:
            return token_id == self.token_id
        token = self.prepared.vocab.token_bytes[token_id]
        return bool(token) and (tail + token).endswith(self.text)
