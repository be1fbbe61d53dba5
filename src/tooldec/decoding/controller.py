"""One sequence's decoding policy: free text, a trigger, a guided call, then back to text or stop.

The controller answers two questions per step, whoever runs the model: which tokens may come next
(`allowed`, None for all) and which tokens are forced and can be appended without sampling (`forced`).
Every token that enters the sequence is passed to `feed`, which reports a finished call as a CallEvent.
"""

from __future__ import annotations

import enum
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tooldec.compiler import CompiledGrammar
from tooldec.decoding.jump_forward import ForcedText, complete_utf8
from tooldec.decoding.trigger import Trigger
from tooldec.grammar.calls import CallParseError, ParsedCall
from tooldec.guide import Guide

ToolChoice = Literal["auto", "none", "required"]


class Mode(enum.Enum):
    """Where a sequence is: free text, inside a guided call, or finished."""

    TEXT = "text"
    TOOL = "tool"
    DONE = "done"


@dataclass
class CallEvent:
    """A call the model finished writing: its text (trigger included) and what it parses to."""

    text: str
    calls: list[ParsedCall] = field(default_factory=list)
    error: str | None = None


_FORCED: dict[int, ForcedText] = {}


def _forced_text(grammar: CompiledGrammar) -> ForcedText:
    """One ForcedText per compiled grammar, shared by every sequence decoding with it, dropped with its DFA."""
    key = id(grammar.dfa)
    got = _FORCED.get(key)
    if got is None:
        got = _FORCED[key] = ForcedText(grammar.dfa)
        weakref.finalize(grammar.dfa, _FORCED.pop, key, None)
    return got


class CallController:
    """Text mode until the trigger, tool mode guided by `grammar` until the call is complete, then `after_call`.

    - `trigger=None`: the sequence is a call from its first token (the whole output is guided).
    - `tool_choice`: "auto" lets the model choose, "required" starts in the call (the trigger is forced),
      "none" bans the trigger so no call can be written.
    - `after_call`: "stop" ends the sequence after the call, "text" returns to text mode (parallel calls,
      or the caller appends the tool's result and decoding goes on), up to `max_calls` calls.
    - `stop`: texts that end the sequence when written in text mode (e.g. the next few-shot "\nQ:").
    """

    def __init__(
        self,
        grammar: CompiledGrammar,
        *,
        trigger: str | int | None = None,
        tool_choice: ToolChoice = "auto",
        after_call: Literal["stop", "text"] = "stop",
        max_calls: int = 16,
        stop: tuple[str, ...] = (),
    ) -> None:
        """Start in tool mode when there is no trigger or a call is required, else in text mode."""
        if tool_choice not in ("auto", "none", "required"):
            raise ValueError(f"tool_choice must be auto, none or required, not {tool_choice!r}")
        self.grammar = grammar
        self.vocab = grammar.index.vocab
        self.trigger = Trigger.of(self.vocab, trigger) if trigger is not None else None
        self.tool_choice = tool_choice
        self.after_call = after_call
        self.max_calls = max_calls
        self.events: list[CallEvent] = []
        self.tokens: list[int] = []
        self._tail = b""
        self._stops = [t.encode() for t in stop if t]
        self._recent = b""
        self._guide: Guide | None = None
        self._forced = _forced_text(grammar)
        self._pending_trigger: list[int] = []
        self.mode = Mode.TEXT
        if self.trigger is None or tool_choice == "required":
            self._enter_tool(forced=True)

    @property
    def done(self) -> bool:
        """Whether the sequence is finished."""
        return self.mode is Mode.DONE

    @property
    def guide(self) -> Guide | None:
        """The guide of the call being written, if any."""
        return self._guide

    def _enter_tool(self, *, forced: bool) -> None:
        """Switch to tool mode. A trigger the model wrote is walked through the guide; a forced one is pending."""
        self.mode = Mode.TOOL
        self._guide = self.grammar.guide()
        trig = self.trigger
        if trig is None:
            return
        if trig.token_id is None:
            for token in trig.tokens():
                self._guide.advance(token)
        if forced:
            self._pending_trigger = trig.tokens()

    def allowed(self) -> np.ndarray | None:
        """Boolean mask over the vocabulary of the tokens allowed next (None: every token)."""
        if self.mode is Mode.DONE:
            return self._only(self.vocab.eos_ids)
        if self._pending_trigger:
            return self._only([self._pending_trigger[0]])
        if self.mode is Mode.TOOL:
            assert self._guide is not None
            return self._guide.bool_mask()
        if self.trigger is None:
            return None
        allow = self.tool_choice != "none" and len(self.events) < self.max_calls
        banned = self.trigger.banned(self._tail, allow=allow)
        return None if banned is None else ~banned

    def _only(self, ids: Any) -> np.ndarray:
        mask = np.zeros(self.vocab.size, dtype=bool)
        mask[list(ids)] = True
        return mask

    def forced(self) -> list[int]:
        """Tokens that must come next whatever the model says: a forced trigger, then the forced stretch of the
        call, canonically tokenised (jump-forward). Feed them before asking for the next token."""
        if self._pending_trigger:
            return list(self._pending_trigger)
        if self.mode is not Mode.TOOL:
            return []
        assert self._guide is not None
        data = complete_utf8(self._forced.after(self._guide.state))
        if not data:
            return []
        tokens = self.vocab.encode(data)
        probe = self._guide.fork()
        for token in tokens:
            if not probe.accepts(token):
                return []
            probe.advance(token)
        return tokens

    def feed(self, token_id: int) -> CallEvent | None:
        """Take the next token of the sequence; returns the call it completes, if any."""
        if self.mode is Mode.DONE:
            raise ValueError("the sequence is finished")
        self.tokens.append(token_id)
        if self._pending_trigger:
            if token_id != self._pending_trigger[0]:
                raise ValueError(f"token {token_id} is not the forced trigger token {self._pending_trigger[0]}")
            self._pending_trigger.pop(0)
            return None
        if self.mode is Mode.TOOL:
            assert self._guide is not None
            self._guide.advance(token_id)
            if self._guide.is_finished():
                return self._finish_call()
            return None
        if token_id in self.vocab.eos_ids:
            self.mode = Mode.DONE
            return None
        token = self.vocab.token_bytes[token_id] or b""
        if self._stops:
            keep = max(len(t) for t in self._stops) + len(token)
            self._recent = (self._recent + token)[-keep:]
            if any(t in self._recent for t in self._stops):
                self.mode = Mode.DONE
                return None
        trig = self.trigger
        if trig is not None and self.tool_choice != "none" and trig.fired(self._tail, token_id):
            self._tail = b""
            self._enter_tool(forced=False)
        elif trig is not None:
            self._tail = (self._tail + token)[-max(trig.length, 1) :]
        return None

    def stop(self) -> None:
        """End the sequence now (the caller decided it is complete, e.g. a ReAct `Finish`)."""
        self.mode = Mode.DONE
        self._guide = None
        self._pending_trigger = []

    def inject(self, tokens: list[int]) -> None:
        """Tokens the caller appends in text mode (a tool's result): part of the sequence, never a trigger."""
        if self.mode is not Mode.TEXT:
            raise ValueError("text can only be injected in text mode")
        self.tokens.extend(tokens)
        self._tail = b""
        self._recent = b""

    def _finish_call(self) -> CallEvent:
        """Parse the finished call and move on to text mode or stop."""
        assert self._guide is not None
        text = self._guide.text()
        if self.trigger is not None and self.trigger.token_id is not None:
            names = {v: k for k, v in self.vocab.special_ids.items()}
            text = names.get(self.trigger.token_id, "") + text
        fmt = self.grammar.format
        try:
            parse_all = getattr(fmt, "parse_all", None)
            calls = parse_all(self._guide.text()) if parse_all else [self._guide.result()]
            event = CallEvent(text, calls)
        except (CallParseError, ValueError) as exc:
            event = CallEvent(text, [], str(exc))
        self.events.append(event)
        self._guide = None
        if self.after_call == "stop" or len(self.events) >= self.max_calls:
            self.mode = Mode.DONE
        else:
            self.mode = Mode.TEXT
        return event


class FreeController:
    """Unconstrained decoding that still notices calls: the baseline ToolDec is compared with.

    After every token the text generated since the last call is matched against `call_end` (a regex that
    must match at the end, e.g. ToolkenGPT's `<tool>(...)=`); a match is parsed best-effort with `parse`
    and reported as a CallEvent (with the parse error, if any). Never masks, never forces.
    """

    def __init__(
        self,
        vocab: Any,
        call_end: re.Pattern[str] | None,
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

    @property
    def done(self) -> bool:
        """Whether the sequence is finished."""
        return self.mode is Mode.DONE

    def allowed(self) -> np.ndarray | None:
        """Every token is allowed."""
        return None

    def forced(self) -> list[int]:
        """The `start` tokens, once; nothing after them is forced."""
        start, self._start = self._start, []
        return start

    def feed(self, token_id: int) -> CallEvent | None:
        """Take the next token; report a call when the text now ends with one."""
        self.tokens.append(token_id)
        if token_id in self.vocab.eos_ids:
            self.mode = Mode.DONE
            return None
        self._since += self.vocab.token_bytes[token_id] or b""
        text = self._since.decode("utf-8", errors="replace")
        if any(t in text for t in self.stops):
            self.mode = Mode.DONE
            return None
        m = self.call_end.search(text) if self.call_end is not None else None
        if m is None or self.parse is None:
            return None
        self._since = b""
        try:
            event = CallEvent(m.group(0), [self.parse(m.group(0))])
        except (CallParseError, ValueError) as exc:
            event = CallEvent(m.group(0), [], str(exc))
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
