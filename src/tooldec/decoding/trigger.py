"""The text (or control token) that switches a sequence from free text into a guided call.

In text mode a trigger may only be completed exactly at the end of a token: tokens that would complete it
and run on (`<mult` when the trigger is `<`) are banned, so the whole call after the trigger is guided.
With tool_choice "none" the trigger cannot be written at all. The text-mode masks are packed bitmasks built
once per model and kept in the prepared vocabulary's mask cache. A format may have several triggers
(`Triggers`: Qwen opens calls with `<tool_call>` or a Markdown ```` ```json ```` block); any of them opens a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tooldec.index import PreparedVocab, pack_bool


@dataclass(frozen=True)
class Respelled:
    """A text trigger that the call grammar spells another way: the model writes `text`, the guide is walked
    over `spelled` (Qwen's pretty-printed bare `{\\n  "name": "` opens the compact grammar's `{"name": "`)."""

    text: str
    spelled: str


TriggerSpec = str | int | Respelled
"""One trigger as a caller names it: a text, a control token id, or a text the grammar spells otherwise."""


class Trigger:
    """A trigger over one prepared vocabulary: a text like `<tool_call>` or a control token id like `[TOOL_CALLS]`."""

    def __init__(self, prepared: PreparedVocab, trigger: TriggerSpec) -> None:
        """Check the trigger exists in this vocabulary; its masks are built on first use, once per model."""
        self.prepared = prepared
        vocab = prepared.vocab
        self.token_id: int | None = None
        self.text: bytes = b""
        spelled = trigger.spelled.encode() if isinstance(trigger, Respelled) else b""
        if isinstance(trigger, Respelled):
            trigger = trigger.text
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
        names = {v: k for k, v in vocab.special_ids.items()}
        self.opening: bytes = self.text or names.get(self.token_id, "").encode()
        """The trigger as text: its own text, or the name of its control token (`<tool_call>`)."""
        self.spelled: bytes = spelled or self.opening
        """What the guide is walked over when the grammar does not spell `opening` as written."""
        self.bare: bool = self.text.startswith((b"{", b"["))
        """Whether the trigger is a bare call's own JSON start (`{"name": "`): inside a code block of another
        language it is code, and opens nothing (`grammar.fences`)."""

    def tokens(self) -> list[int]:
        """The tokens that write the trigger when it is forced: its control token, or its text's tokens."""
        return [self.token_id] if self.token_id is not None else self.prepared.vocab.encode(self.text)

    @property
    def length(self) -> int:
        """Bytes of text to keep as the tail when watching for the trigger."""
        return len(self.text)

    def allowed_mask(self, tail: bytes, *, allow: bool, eos: bool = True, code: bool = False) -> np.ndarray | None:
        """The packed mask of tokens that may follow `tail` in text mode (None: every token).

        The trigger may only end at a token's end (allow), or not appear at all (not allow); without `eos` the
        text may not end here (ReAct's text must lead to an action). In `code` (a fenced block of another
        language) a bare trigger is not watched."""
        if code and self.bare:
            return None if eos else without_eos(self.prepared, ("code",), None)
        if self.token_id is not None:
            mask = None if allow else self.prepared.mask(("trigger-ban", self.token_id), self._build_ban)
            key: tuple[object, ...] = ("trigger-ban", self.token_id, allow)
        else:
            started = self._started(tail)
            key = ("trigger", self.text, started, allow)
            mask = self.prepared.mask(key, lambda: self._build(started, allow))
        return mask if eos else without_eos(self.prepared, key, mask)

    def _started(self, tail: bytes) -> tuple[int, ...]:
        """How much of the text trigger `tail` may already have written (each length of a prefix it ends with)."""
        t = self.text
        return tuple(k for k in range(1, len(t)) if tail.endswith(t[:k]))

    def _build_ban(self) -> np.ndarray:
        """Every token but the control token."""
        keep = np.ones(self.prepared.size, dtype=bool)
        keep[self.token_id] = False
        return pack_bool(keep, self.prepared.words)

    def _build(self, started: tuple[int, ...], allow: bool) -> np.ndarray:
        """The tokens allowed for one (prefix of the trigger already written, allow) combination: banned are those
        holding the whole trigger before their last byte, ending with it (not allow), or finishing a started
        trigger (not allow: at all; allow: and running on past its end). Found by searching the vocabulary's
        bytes (`TokenText`), not by a Python pass over every token (1.3 s for Qwen's 151,665 tokens on a loaded
        core, paid by the first requests that reach each combination)."""
        t = self.text
        text = TokenText.of(self.prepared)
        inside, ending = text.containing(t)
        banned = [inside] if allow else [inside, ending]
        for k in started:
            ids = text.starting(t[k:])
            banned.append(ids[text.lengths[ids] > len(t) - k] if allow else ids)
        keep = np.ones(self.prepared.size, dtype=bool)
        keep[np.concatenate(banned)] = False
        return pack_bool(keep, self.prepared.words)

    def fired(self, tail: bytes, token_id: int, *, code: bool = False) -> bool:
        """Whether `token_id`, written after `tail`, completes the trigger (at its end); never a bare trigger in
        `code`."""
        if code and self.bare:
            return False
        if self.token_id is not None:
            return token_id == self.token_id
        token = self.prepared.vocab.token_bytes[token_id]
        return bool(token) and (tail + token).endswith(self.text)

    def opened(self, tail: bytes, token_id: int, *, code: bool = False) -> Trigger | None:
        """This trigger if `token_id` completes it, else None (the same question `Triggers` answers)."""
        return self if self.fired(tail, token_id, code=code) else None


class TokenText:
    """A vocabulary's token bytes laid out for search, once per prepared vocabulary: all of them joined, with the
    offset where each starts and its length."""

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        """Lay out `token_bytes` (None or b"" for tokens without text, which no search finds)."""
        texts = [b or b"" for b in token_bytes]
        self.lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        self.starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(self.lengths[:-1], out=self.starts[1:])
        self.joined = b"".join(texts)
        self.bytes = np.frombuffer(self.joined, dtype=np.uint8)

    @classmethod
    def of(cls, prepared: PreparedVocab) -> TokenText:
        """The layout of `prepared`'s vocabulary, made on first use and kept on it."""
        text: TokenText | None = getattr(prepared, "_token_text", None)
        if text is None:
            text = cls(prepared.vocab.token_bytes)
            prepared._token_text = text  # type: ignore[attr-defined]
        return text

    def containing(self, needle: bytes) -> tuple[np.ndarray, np.ndarray]:
        """The tokens holding `needle` before their last byte, and those ending with it."""
        found = []
        at = self.joined.find(needle)
        while at >= 0:
            found.append(at)
            at = self.joined.find(needle, at + 1)
        pos = np.array(found, dtype=np.int64)
        ids = np.searchsorted(self.starts, pos, side="right") - 1
        end = pos + len(needle)
        token_end = self.starts[ids] + self.lengths[ids]
        return np.unique(ids[end < token_end]), np.unique(ids[end == token_end])

    def starting(self, prefix: bytes) -> np.ndarray:
        """The tokens that start with `prefix` (non-empty)."""
        ids = np.flatnonzero(self.lengths >= len(prefix))
        for j, byte in enumerate(prefix):  # byte j of each candidate, the candidates fewer each time
            ids = ids[self.bytes[self.starts[ids] + j] == byte]
        return ids


class Triggers:
    """Several triggers over one prepared vocabulary, any of which opens a call; the first is the one forced."""

    def __init__(self, prepared: PreparedVocab, triggers: Sequence[TriggerSpec]) -> None:
        """At least one trigger; each is checked as `Trigger` checks it."""
        if not triggers:
            raise ValueError("no trigger")
        self.prepared = prepared
        self.members = [Trigger(prepared, t) for t in triggers]
        self.first = self.members[0]
        self.length = max(m.length for m in self.members)
        """Bytes of text to keep as the tail: enough for the longest trigger."""
        self.bare = any(m.bare for m in self.members)
        """Whether a member is a bare call's JSON start (the text's code fences then matter)."""

    def tokens(self) -> list[int]:
        """The first trigger's tokens (what a required call forces)."""
        return self.first.tokens()

    def allowed_mask(self, tail: bytes, *, allow: bool, eos: bool = True, code: bool = False) -> np.ndarray | None:
        """The tokens every trigger watched allows after `tail` (None: every token), combined once per
        combination; without `eos`, EOS is not among them; in `code`, bare triggers are not watched."""
        members = [t for t in self.members if not (code and t.bare)]
        masks = [m for m in (t.allowed_mask(tail, allow=allow) for t in members) if m is not None]
        if len(masks) < 2 and eos:
            return masks[0] if masks else None
        key = ("triggers", tuple((m.token_id, m.text, m._started(tail)) for m in members), allow)
        if len(masks) < 2:
            mask = masks[0] if masks else None
        else:
            mask = self.prepared.mask(key, lambda: np.bitwise_and.reduce(np.stack(masks), axis=0))
        return mask if eos else without_eos(self.prepared, key, mask)

    def opened(self, tail: bytes, token_id: int, *, code: bool = False) -> Trigger | None:
        """The trigger `token_id` completes after `tail`, if any: the longest where several end there (Llama 3.1's
        `[{"name": ` over `{"name": `); in `code`, never a bare one."""
        fired = [m for m in self.members if m.fired(tail, token_id, code=code)]
        return max(fired, key=lambda m: m.length) if fired else None


def without_eos(prepared: PreparedVocab, key: tuple[object, ...], mask: np.ndarray | None) -> np.ndarray:
    """`mask` (None: every token) less the EOS tokens, cached in the prepared vocabulary under `key`."""

    def build() -> np.ndarray:
        kept = pack_bool(np.ones(prepared.size, dtype=bool), prepared.words) if mask is None else mask.copy()
        return kept & ~prepared.eos_mask

    return prepared.mask(("no-eos", *key), build)


def make_trigger(prepared: PreparedVocab, trigger: TriggerSpec | Sequence[TriggerSpec] | None) -> Trigger | Triggers | None:
    """A Trigger for one text or control token, Triggers for several, None for none."""
    if trigger is None:
        return None
    if isinstance(trigger, (str, int, Respelled)):
        return Trigger(prepared, trigger)
    return Triggers(prepared, list(trigger)) if len(trigger) > 1 else Trigger(prepared, trigger[0])
