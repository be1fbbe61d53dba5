"""One sequence's decoding policy: free text, a trigger, a guided call, then back to text or stop.

The policy is torch-free and speaks the verbs serving engines use: `fill_bitmask(out, row)` writes the packed
mask of the tokens allowed next (`fill_bitmasks` does a whole batch in one call of the compiled core, without
the GIL), `accept_token(s)` takes the tokens that entered the sequence and reports finished calls,
`validate_tokens` says how many of some tokens would be accepted, `rollback(n)` undoes tokens,
`is_terminated` and `reset`. `forced()` gives the tokens that must come next whatever the model says
(jump-forward). The mask convention is `int32[batch, ceil(V/32)]`, token t is bit `t & 31` of word `t >> 5`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np

from tooldec import _core
from tooldec.cfg_guide import CfgGuide, CompiledCfg
from tooldec.compiler import CompiledGrammar
from tooldec.decoding.trigger import Trigger, Triggers, TriggerSpec, make_trigger
from tooldec.errors import TokenRejectedError
from tooldec.grammar.calls import CallParseError, ParsedCall, new_calls, several_in_block
from tooldec.grammar.fences import START as FENCE_START
from tooldec.grammar.fences import FenceState
from tooldec.grammar.fences import step as fence_step
from tooldec.guide import Guide
from tooldec.index import PreparedVocab, pack_ids

ToolChoice = Literal["auto", "none", "required"]
MaskSource = tuple[Any, int] | np.ndarray | None
"""A row's mask for `_core.fill_bitmasks`: (core index, state), a packed int32 row to copy, or None for all."""


class Mode(enum.Enum):
    """Where a sequence is: free text, inside a guided call, or finished."""

    TEXT = "text"
    TOOL = "tool"
    DONE = "done"


@dataclass
class CallEvent:
    """A call the model finished writing: its text (trigger included) and what it parses to, but calls made before
    in the same turn. A `repeat` makes only calls made before: it adds none (`calls` is empty), and it ended the
    turn."""

    text: str
    calls: list[ParsedCall] = field(default_factory=list)
    error: str | None = None
    repeat: bool = False


class Policy(Protocol):
    """What a decoding loop needs of one sequence's policy (CallController, FreeController)."""

    tokens: list[int]
    events: list[CallEvent]

    @property
    def done(self) -> bool: ...
    def mask_source(self) -> MaskSource: ...
    def accept_token(self, token_id: int) -> CallEvent | None: ...
    def forced(self) -> list[int]: ...
    def stop(self) -> None: ...
    def inject(self, tokens: list[int]) -> None: ...


def fill_bitmasks(policies: Sequence[Policy], out: np.ndarray, rows: Sequence[int] | None = None, *,
                  threads: int = 1) -> None:
    """Fill row `rows[i]` (default i) of the `int32[B, W]` array `out` with policy i's mask, in one core call."""
    rows_arr = np.arange(len(policies), dtype=np.int32) if rows is None else np.asarray(rows, dtype=np.int32)
    _core.fill_bitmasks(out, [p.mask_source() for p in policies], rows_arr, threads)


class _Undoable(Protocol):
    def accept_token(self, token_id: int) -> Any: ...
    def rollback(self, n: int = 1) -> None: ...


def accept_in_turn(policy: _Undoable, tokens: Sequence[int]) -> list[Any]:
    """`policy.accept_token` of each token in turn; returns the calls they complete. All or none: a rejected token
    rolls back the ones before it and its TokenRejectedError propagates."""
    events = []
    for n, token in enumerate(tokens):
        try:
            event = policy.accept_token(token)
        except TokenRejectedError:
            policy.rollback(n)
            raise
        if event is not None:
            events.append(event)
    return events


def _allows(source: MaskSource, token_id: int) -> bool:
    """Whether a mask source allows `token_id`."""
    if source is None:
        return True
    if isinstance(source, tuple):
        return bool(source[0].next_state(source[1], token_id) != 0)
    if isinstance(source, _core.CfgMatcher):
        return bool(source.accepts(token_id))
    return 0 <= token_id < source.shape[0] * 32 and bool((int(source[token_id >> 5]) >> (token_id & 31)) & 1)


def _walked(guide: Guide | CfgGuide, tokens: list[int]) -> bool:
    """Advance a fresh guide over `tokens`; where it rejects one, undo them all and say so."""
    for token in tokens:
        if not guide.accepts(token):
            guide.rollback(guide.num_tokens)
            return False
        guide.advance(token)
    return True


class _Snapshot(NamedTuple):
    """What one accepted token changed, so that rollback can undo it (a tuple: one is made per token)."""

    mode: Mode
    tail: bytes
    recent: bytes
    guide: Guide | CfgGuide | None
    guide_tokens: int
    pending_trigger: tuple[int, ...]
    events: int
    written: tuple[str, tuple[str, str] | None] = ("", None)
    """The call's trigger as written where the guide does not hold it (`_unspelled`, `_respelled`)."""
    fence: FenceState = FENCE_START
    """Where the text stands among Markdown code fences (a bare trigger opens nothing inside a code block)."""


class CallController:
    """Text mode until the trigger, tool mode guided by `grammar` until the call is complete, then `after_call`.

    - `trigger=None`: the sequence is a call from its first token (the whole output is guided); several
      triggers (`("<tool_call>", "```json")`): any opens a call, the first is the one a required call forces.
      The guide starts after the trigger's text, also when the trigger is a control token the grammar spells
      as text (`<tool_call>` as one special token before a `<tool_call>\n{...}` grammar).
    - `tool_choice`: "auto" lets the model choose, "required" starts in the call (the trigger is forced),
      "none" bans the trigger so no call can be written.
    - `after_call`: "stop" ends the sequence after the call, "text" returns to text mode (parallel calls,
      or the caller appends the tool's result and decoding goes on), up to `max_calls` calls.
    - `stop`: texts that end the sequence when written in text mode (e.g. the next few-shot "\nQ:").
    - `text_first=True`: EOS is not allowed before some text other than whitespace (an answer that may not be
      empty).
    - A call that only repeats calls made before in the same turn (since the start or the last `inject`) ends the
      sequence and is reported as a `repeat`, with no calls: a model that writes the same call again is looping
      (SmolLM2 wrote one BFCL call until max_tokens when a call was required), and the repeat adds nothing. In a
      block that holds several calls, the first call object that repeats one ends the sequence there, the block
      left open (Qwen2.5-Coder wrote one call over and over in a fence until max_tokens).
    - `end_in_text=False`: EOS is not allowed in text mode, so the text leads to a call (ReAct's format: a
      Thought line, then an Action, until the `Finish` action ends the sequence).

    A trigger the grammar does not spell (a control token, or a text such as ReAct's newline before `Action:`)
    stays in the text before the call, and the guide starts at the grammar's start; a `Respelled` one is walked
    through the guide as the grammar spells it, and the call's text keeps it as the model wrote it.
    """

    def __init__(
        self,
        grammar: CompiledGrammar | CompiledCfg,
        *,
        trigger: TriggerSpec | Sequence[TriggerSpec] | None = None,
        tool_choice: ToolChoice = "auto",
        after_call: Literal["stop", "text"] = "stop",
        max_calls: int = 16,
        stop: tuple[str, ...] = (),
        end_in_text: bool = True,
        text_first: bool = False,
    ) -> None:
        """Start in tool mode when there is no trigger or a call is required, else in text mode."""
        if tool_choice not in ("auto", "none", "required"):
            raise ValueError(f"tool_choice must be auto, none or required, not {tool_choice!r}")
        if not end_in_text and (trigger is None or tool_choice == "none"):
            raise ValueError("a text that may not end needs a trigger it may write (end_in_text=False)")
        self.grammar = grammar
        self.prepared: PreparedVocab = grammar.prepared
        self.vocab = self.prepared.vocab
        self.trigger: Trigger | Triggers | None = make_trigger(self.prepared, trigger)
        self.tool_choice = tool_choice
        self.after_call = after_call
        self.max_calls = max_calls
        self._stops = [t.encode() for t in stop if t]
        self.end_in_text = end_in_text
        self.text_first = text_first
        fmt = getattr(grammar, "format", None)
        self._several = fmt is not None and not isinstance(fmt, str) and several_in_block(fmt) is not None
        """Whether one block may hold several calls: each call object's end is then checked for a repeat."""
        self.reset()

    def reset(self) -> None:
        """Back to the start of the sequence: no tokens, no calls."""
        self.events: list[CallEvent] = []
        self.tokens: list[int] = []
        self._tail = b""
        self._recent = b""
        self._fence = FENCE_START
        self._guide: Guide | CfgGuide | None = None
        self._pending_trigger: list[int] = []
        self._history: list[_Snapshot] = []
        self._unspelled = ""  # a trigger the grammar does not spell, written before the call's text
        self._respelled: tuple[str, str] | None = None  # (as the guide spells the trigger, as the model wrote it)
        self._text_at: int | None = None  # where the first token with text other than whitespace was accepted
        self._turns: list[tuple[int, int]] = []  # (tokens, events) where each injected text began a new turn
        self.mode = Mode.TEXT
        if self.trigger is None or self.tool_choice == "required":
            self._enter_tool(forced=True)

    @property
    def done(self) -> bool:
        """Whether the sequence is finished."""
        return self.mode is Mode.DONE

    def is_terminated(self) -> bool:
        """Whether the sequence is finished (only EOS may follow)."""
        return self.mode is Mode.DONE

    @property
    def guide(self) -> Guide | CfgGuide | None:
        """The guide of the call being written, if any."""
        return self._guide

    def _enter_tool(self, *, forced: bool, opened: Trigger | None = None) -> None:
        """Switch to tool mode. The trigger (`opened`, or the first) is walked through the guide as text where the
        grammar spells it, else kept as the text before the call; a forced one is pending."""
        self.mode = Mode.TOOL
        self._fence = FENCE_START  # the call's grammar holds its own fence; text after the call is outside one
        self._guide = guide = self.grammar.guide()
        self._unspelled = ""
        self._respelled = None
        trig = self.trigger
        if trig is None:
            return
        opened = opened or (trig.first if isinstance(trig, Triggers) else trig)
        spelled: list[int] = []
        self._unspelled = opened.opening.decode()
        for text in dict.fromkeys((opened.opening, opened.spelled)):  # as written, else as the grammar spells it
            spelled = self.vocab.encode(text) if text else []
            if _walked(guide, spelled):
                self._unspelled = ""
                self._respelled = (text.decode(), opened.opening.decode()) if text != opened.opening else None
                break
        if forced and opened.token_id is None and not self._unspelled:
            # a required text trigger is forced but for a last token that may run on into the call, which the
            # model then writes itself (`<m`), as in forced(); the guide was walked over the forced tokens only
            self._respelled = None  # forced, the trigger is written as the grammar spells it
            held = False
            if spelled:
                guide.rollback(1)
                held = guide.runs_on(spelled[-1])
                if not held:
                    guide.advance(spelled[-1])
            self._pending_trigger = spelled[:-1] if held else spelled
        elif forced:
            self._pending_trigger = opened.tokens()

    def mask_source(self) -> MaskSource:
        """This row's mask for the batch fill: the guide's state, a cached packed mask, or None (every token)."""
        if self.mode is Mode.DONE:
            return self.prepared.eos_mask
        if self._pending_trigger:
            token = self._pending_trigger[0]
            return self.prepared.mask(("only", token), lambda: pack_ids([token], self.prepared.words))
        if self.mode is Mode.TOOL:
            assert self._guide is not None
            return self._guide.mask_source()
        if self.trigger is None:
            return None
        allow = self.tool_choice != "none" and len(self.events) < self.max_calls
        eos = self.end_in_text and (not self.text_first or self._text_at is not None)
        return self.trigger.allowed_mask(self._tail, allow=allow, eos=eos, code=self._fence.in_code)

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None:
        """Write the packed mask of the tokens allowed next into row `row` of an `int32[B, W]` array."""
        fill_bitmasks([self], out, [row])

    def forced(self) -> list[int]:
        """Tokens that must come next whatever the model says: a forced trigger, then the forced stretch of the
        call, canonically tokenised (jump-forward), but for a last token that a longer allowed token extends
        (the model may merge the stretch's end with what follows). Accept them before asking for the next token."""
        if self._pending_trigger:
            return list(self._pending_trigger)
        if self.mode is not Mode.TOOL:
            return []
        guide = self._guide
        assert guide is not None
        data = guide.forced_bytes()
        if not data:
            return []
        tokens = self.vocab.encode(data)
        for n, token in enumerate(tokens):  # walked on the guide itself, then undone: no copy per step
            if not guide.accepts(token):
                guide.rollback(n)
                return []
            guide.advance(token)
        guide.rollback(1)
        held = guide.runs_on(tokens[-1])
        guide.rollback(len(tokens) - 1)
        return tokens[:-1] if held else tokens

    def accept_token(self, token_id: int) -> CallEvent | None:
        """Take the next token of the sequence; returns the call it completes, if any.

        Raises TokenRejectedError for a token the mask does not allow (EOS is accepted after the end)."""
        guide = self._guide
        if self.mode is Mode.TOOL and not self._pending_trigger:  # the guided step: one walk of the token
            assert guide is not None
            before = guide.num_tokens
            guide.advance(token_id)
            self._history.append(_Snapshot(Mode.TOOL, self._tail, self._recent, guide, before, (), len(self.events),
                                           (self._unspelled, self._respelled)))
            self.tokens.append(token_id)
            if not guide.is_finished():
                block = self._repeating_block() if self._several and b"}" in (self.vocab.token_bytes[token_id] or b"") else None
                if block is None:
                    return None
                event = self._finish_call(block)  # a call object in the block repeats one: the end
                self.mode = Mode.DONE
                return event
            event = self._finish_call()
            if token_id in self.vocab.eos_ids:  # the text ended with the call (a block of several left open)
                self.mode = Mode.DONE
            return event
        source = self.mask_source()
        if not _allows(source, token_id):
            tb = self.vocab.token_bytes
            text = tb[token_id] if 0 <= token_id < len(tb) else None
            state = self._guide.state if isinstance(self._guide, Guide) else -1
            raise TokenRejectedError(token_id, state, text)
        self._history.append(
            _Snapshot(self.mode, self._tail, self._recent, guide, guide.num_tokens if guide else 0,
                      tuple(self._pending_trigger), len(self.events), (self._unspelled, self._respelled),
                      self._fence)
        )
        self.tokens.append(token_id)
        if self.mode is Mode.DONE:
            return None
        if self._pending_trigger:
            self._pending_trigger.pop(0)
            return None
        if token_id in self.vocab.eos_ids:
            self.mode = Mode.DONE
            return None
        token = self.vocab.token_bytes[token_id] or b""
        if self._text_at is None and token.strip():
            self._text_at = len(self.tokens) - 1
        if self._stops:
            keep = max(len(t) for t in self._stops) + len(token)
            self._recent = (self._recent + token)[-keep:]
            if any(t in self._recent for t in self._stops):
                self.mode = Mode.DONE
                return None
        trig = self.trigger
        opened = None
        if trig is not None:
            if self.tool_choice != "none":
                opened = trig.opened(self._tail, token_id, code=self._fence.in_code)
            if trig.bare:  # only a bare trigger minds code fences
                self._fence = fence_step(self._fence, token.decode("latin-1"))
        if opened is not None:
            self._tail = b""
            self._enter_tool(forced=False, opened=opened)
        elif trig is not None:
            self._tail = (self._tail + token)[-max(trig.length, 1) :]
        return None

    def accept_tokens(self, tokens: Sequence[int]) -> list[CallEvent]:
        """Take several tokens in turn; returns the calls they complete. All or none: a rejected token undoes
        the ones before it and raises TokenRejectedError."""
        return accept_in_turn(self, tokens)

    def validate_tokens(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, would be accepted in turn (the policy is left as it was)."""
        n = 0
        for token in tokens:
            if not _allows(self.mask_source(), token):
                break
            self.accept_token(token)
            n += 1
        self.rollback(n)
        return n

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` accepted tokens (calls they completed are forgotten)."""
        if n < 0 or n > len(self._history):
            raise ValueError(f"cannot roll back {n} tokens of {len(self._history)}")
        for _ in range(n):
            snap = self._history.pop()
            self.tokens.pop()
            self.mode = snap.mode
            self._tail = snap.tail
            self._recent = snap.recent
            self._pending_trigger = list(snap.pending_trigger)
            del self.events[snap.events :]
            self._guide = snap.guide
            self._unspelled, self._respelled = snap.written
            self._fence = snap.fence
            if snap.guide is not None:
                snap.guide.rollback(snap.guide.num_tokens - snap.guide_tokens)
        if self._text_at is not None and self._text_at >= len(self.tokens):
            self._text_at = None
        while self._turns and self._turns[-1][0] >= len(self.tokens):
            self._turns.pop()

    def stop(self) -> None:
        """End the sequence now (the caller decided it is complete, e.g. a ReAct `Finish`)."""
        self.mode = Mode.DONE
        self._guide = None
        self._pending_trigger = []

    def inject(self, tokens: list[int]) -> None:
        """Tokens the caller appends in text mode (a tool's result): part of the sequence, never a trigger."""
        if self.mode is not Mode.TEXT:
            raise ValueError("text can only be injected in text mode")
        if tokens:
            self._turns.append((len(self.tokens), len(self.events)))
        for token in tokens:
            self._history.append(_Snapshot(self.mode, self._tail, self._recent, None, 0, (), len(self.events),
                                           fence=self._fence))
            self.tokens.append(token)
        self._tail = b""
        self._recent = b""
        self._fence = FENCE_START

    def _repeating_block(self) -> list[ParsedCall] | None:
        """The calls of the block being written where it ends with a whole call object (but for the start of a
        separator: a token may hold both, Qwen's `}}\n`) that repeats a call of the turn or of the block; else
        None."""
        assert self._guide is not None
        try:
            calls = self.grammar.format.parse_all(self._guide.text().rstrip(" \n,"))  # type: ignore[union-attr]
        except (CallParseError, ValueError):
            return None
        return calls if calls[-1] in calls[:-1] or calls[-1] in self._turn_calls() else None

    def _turn_calls(self) -> list[ParsedCall]:
        """The calls the turn made so far (since the start or the last `inject`)."""
        return [call for e in self.events[self._turns[-1][1] if self._turns else 0 :] for call in e.calls]

    def _finish_call(self, block: list[ParsedCall] | None = None) -> CallEvent:
        """Parse the finished call (`block`: the calls of a block of several already read, the text ending inside
        it) and move on to text mode or stop."""
        assert self._guide is not None
        text = self._unspelled + self._guide.text()
        if self._respelled is not None:
            text = self._respelled[1] + text[len(self._respelled[0]):]
        fmt = self.grammar.format
        try:
            parse_all = getattr(fmt, "parse_all", None)
            calls = block or (parse_all(self._guide.text()) if parse_all else [self._guide.result()])
            event = CallEvent(text, calls)
        except (CallParseError, ValueError) as exc:
            event = CallEvent(text, [], str(exc))
        new = new_calls(event.calls, self._turn_calls())  # a block may hold several
        if event.calls and not new:
            event = CallEvent(text, repeat=True)
        elif len(new) < len(event.calls):
            event = CallEvent(text, new)
        self.events.append(event)
        self._guide = None
        if event.repeat or self.after_call == "stop" or len(self.events) >= self.max_calls:
            self.mode = Mode.DONE
        else:
            self.mode = Mode.TEXT
        return event


class FreeController:
    """Unconstrained decoding that still notices calls: the baseline ToolDec is compared with.

    After every token the text generated since the last call is matched against `call_end` (a function giving
    the call the text ends with, or a regex that
    must match at the end, e.g. ToolkenGPT's `<tool>(...)=`); a match is parsed best-effort with `parse`
    and reported as a CallEvent (with the parse error, if any). A control token other than EOS is read as its
    name (`<tool_call>` when the tokenizer has it as one special token), as the guided path reads it. Never
    masks, never forces.
    """

    def __init__(
        self,
        vocab: Any,
        call_end: re.Pattern[str] | Callable[[str], str | None] | None,
        parse: Callable[[str], ParsedCall] | None = None,
        *,
        after_call: Literal["stop", "text"] = "text",
        max_calls: int = 16,
        stop: tuple[str, ...] = (),
        start: Sequence[int] = (),
    ) -> None:
        """Watch for calls matching `call_end` (None: the caller reads calls afterwards); stop on EOS, a stop
        text or `max_calls` calls. `start` is forced before free decoding begins (a required call's trigger)."""
        self.vocab = vocab
        self.call_end = call_end
        self.parse = parse
        self.after_call = after_call
        self.max_calls = max_calls
        self.stops = [t for t in stop if t]
        self.events: list[CallEvent] = []
        self.tokens: list[int] = []
        self.mode = Mode.TEXT
        self._since = b""
        self._start = list(start)
        self._names = {i: n.encode() for n, i in getattr(vocab, "special_ids", {}).items()}

    @property
    def done(self) -> bool:
        """Whether the sequence is finished."""
        return self.mode is Mode.DONE

    def mask_source(self) -> MaskSource:
        """Every token is allowed."""
        return None

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None:
        """Allow every token in row `row`."""
        out[row] = -1

    def forced(self) -> list[int]:
        """The `start` tokens, once; nothing after them is forced."""
        start, self._start = self._start, []
        return start

    def accept_token(self, token_id: int) -> CallEvent | None:
        """Take the next token; report a call when the text now ends with one."""
        self.tokens.append(token_id)
        if token_id in self.vocab.eos_ids:
            self.mode = Mode.DONE
            return None
        self._since += self.vocab.token_bytes[token_id] or self._names.get(token_id, b"")
        text = self._since.decode("utf-8", errors="replace")
        if any(t in text for t in self.stops):
            self.mode = Mode.DONE
            return None
        if self.call_end is None or self.parse is None:
            return None
        if callable(self.call_end):
            found = self.call_end(text)
        else:
            m = self.call_end.search(text)
            found = m.group(0) if m is not None else None
        if found is None:
            return None
        self._since = b""
        try:
            event = CallEvent(found, [self.parse(found)])
        except (CallParseError, ValueError) as exc:
            event = CallEvent(found, [], str(exc))
        self.events.append(event)
        if self.after_call == "stop" or len(self.events) >= self.max_calls:
            self.mode = Mode.DONE
        return event

    def stop(self) -> None:
        """End the sequence now."""
        self.mode = Mode.DONE

    def inject(self, tokens: list[int]) -> None:
        """Tokens the caller appends (a tool's result)."""
        self.tokens.extend(tokens)
        self._since = b""
