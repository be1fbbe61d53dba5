"""From the tokens a row's policy accepts to an OpenAI assistant message, as deltas while it is written.

Text-mode tokens are content. A trigger the model writes is not: content that could still be the start of
one of the triggers (or of a stop string) is held back until it cannot. Tool-mode tokens are a call: its name
is announced once it is complete (`{"index", "id", "type", "function": {"name", "arguments": ""}}`), the
tool's own name where the call used an alias (a unique suffix, `tooldec.grammar.calls.with_aliases`), and its
arguments follow in pieces as they are written, exactly the JSON text the grammar let through, so that the
pieces concatenate to the non-streamed `arguments`. A custom tool's call (`tooldec.grammar.custom`) is announced
as `{"index", "id", "type": "custom", "custom": {"name", "input": ""}}` and its input follows decoded from the
call's JSON string, in pieces that concatenate to the non-streamed `input`. A call whose text so far begins an
earlier call's of the same tool is held back until it differs: where it ends as a repeat (the policy then ends the
turn, `CallController`), it is left out, never announced. Leading and trailing whitespace of the content is dropped,
which streaming does too (whitespace is released only once text follows it).
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from tooldec.chat.reader import CALL_HEAD, json_string_prefix, json_value_end
from tooldec.decoding.controller import CallEvent, Mode
from tooldec.decoding.trigger import Triggers
from tooldec.serve.protocol import call_id

Kind = Literal["tools", "json", "grammar", "text"]
WHOLE: tuple[Kind, ...] = ("json", "grammar")
"""Kinds whose whole output is the guided text, kept as written (no trigger, stop string or strip)."""

def decode_prefix(data: bytes) -> str:
    """The text of `data` without an incomplete UTF-8 character at its end (it may complete later)."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace")


def canonical_names(fmt: Any) -> dict[str, str]:
    """Alias -> tool name of a call format (empty without aliases), looked up through wrapping formats."""
    while fmt is not None:
        table = getattr(fmt, "canonical", None)
        if isinstance(table, dict):
            return table
        fmt = getattr(fmt, "inner", None)
    return {}


def held_back(data: bytes, holds: list[bytes]) -> int:
    """How many bytes at the end of `data` could be the start of one of `holds` (the longest such)."""
    best = 0
    for h in holds:
        for k in range(min(len(h) - 1, len(data)), best, -1):
            if data.endswith(h[:k]):
                best = k
                break
    return best


@dataclass
class ToolCallOut:
    """A call as the client sees it: id, tool name, arguments text (a custom tool's input) so far, and whether it
    is complete."""

    id: str
    name: str
    arguments: str = ""
    complete: bool = False
    custom: bool = False
    whole: bool = False
    """Its arguments are written whole (its block, which may hold more calls, may still go on)."""

    def to_openai(self) -> dict[str, Any]:
        """The `tool_calls` entry of a message."""
        if self.custom:
            return {"id": self.id, "type": "custom", "custom": {"name": self.name, "input": self.arguments}}
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def delta(self, index: int, piece: str, *, head: bool = False) -> dict[str, Any]:
        """A stream delta of this call: its announcement (`head`, with `piece` "") or a piece of its text."""
        kind, key = ("custom", "input") if self.custom else ("function", "arguments")
        body = {**({"name": self.name} if head else {}), key: piece}
        return {"tool_calls": [{"index": index, **({"id": self.id, "type": kind} if head else {}), kind: body}]}


@dataclass
class OutputBuilder:
    """Builds one row's message from its tokens (`on_token` runs in the stepping thread; `drain` and
    `finish` between steps).

    `kind`: "tools" (content and calls), "json" (the whole output is a JSON value, the content), "grammar" (the
    whole output is a sentence of a context-free grammar, the content) or "text".
    `stop`: stop strings, cut from the content with what follows them."""

    vocab: Any
    policy: Any
    kind: Kind = "text"
    stop: tuple[str, ...] = ()
    content: str = ""
    calls: list[ToolCallOut] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    cut_call: str = ""
    """The text of a call the token limit cut after its name was announced (set by `finish`)."""

    def __post_init__(self) -> None:
        self._deltas: list[dict[str, Any]] = []
        self._content = bytearray()
        self._released = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""
        self._call = bytearray()
        self._pos = 0
        self._args_at: int | None = None
        self._event_first = 0
        self._held = False  # the last call is not announced yet: so far it repeats an earlier one
        self._mode = getattr(self.policy, "mode", Mode.TEXT)
        self._holds = [s.encode() for s in self.stop if s]
        trigger = getattr(self.policy, "trigger", None)
        members = trigger.members if isinstance(trigger, Triggers) else [trigger] if trigger is not None else []
        self._trigger_texts = sorted((t.text for t in members if t.token_id is None), key=len, reverse=True)
        if getattr(self.policy, "tool_choice", "none") != "none":
            self._holds += self._trigger_texts
        grammar = getattr(self.policy, "grammar", None)
        self._canonical = canonical_names(getattr(grammar, "format", None))
        self._custom: frozenset[str] = getattr(getattr(grammar, "format", None), "custom", frozenset())

    def on_token(self, token: int, event: CallEvent | None) -> None:
        """Take one accepted token and the call it completed, if any."""
        before, after = self._mode, getattr(self.policy, "mode", Mode.TEXT)
        self._mode = after
        data = b"" if token in self.vocab.eos_ids else (self.vocab.token_bytes[token] or b"")
        if self.kind in WHOLE:
            self._content += data
            self._release(final=False)
            return
        if before is Mode.TOOL:
            self._call += data
            self._scan(decode_prefix(bytes(self._call)) if event is None else bytes(self._call).decode())
            if event is not None:
                self._complete(event)
            return
        if before is Mode.DONE:
            return
        self._content += data
        if after is Mode.TOOL:  # this token fired a trigger: it and the trigger's text are not content
            fired = next((t for t in self._trigger_texts if self._content.endswith(t)), None)
            cut = len(data) if fired is None else len(fired)
            del self._content[len(self._content) - cut :]
            self._released = min(self._released, len(self._content))
            self._call = bytearray(fired or b"")  # a bare call's trigger is the start of its JSON
            self._pos, self._args_at = 0, None
            self._event_first = len(self.calls)
        self._release(final=False)

    def drain(self) -> list[dict[str, Any]]:
        """The deltas since the last drain, adjacent pieces of the same text merged."""
        out: list[dict[str, Any]] = []
        for delta in self._deltas:
            prev = out[-1] if out else None
            if prev is not None and "content" in delta and "content" in prev:
                prev["content"] += delta["content"]
            elif (
                prev is not None
                and "tool_calls" in delta
                and "tool_calls" in prev
                and "id" not in delta["tool_calls"][0]
                and prev["tool_calls"][0]["index"] == delta["tool_calls"][0]["index"]
            ):
                kind, key = ("custom", "input") if "custom" in delta["tool_calls"][0] else ("function", "arguments")
                prev["tool_calls"][0][kind][key] += delta["tool_calls"][0][kind][key]
            else:
                out.append(json.loads(json.dumps(delta)))
        self._deltas.clear()
        return out

    def finish(self) -> None:
        """Release the content held back (the row is over). A call the row stopped inside (cut by the token
        limit) is not lost: before its name was complete nothing of it reached the client, so its text is content;
        after, its part was streamed as a call, and `cut_call` keeps its text for the whole message. The calls
        its block holds whole before it are complete calls."""
        if self.in_call and self.kind not in WHOLE:
            if self._held:  # never announced: its text is content, as a call cut before its name
                del self.calls[-1]
                self._held = False
            whole = [c for c in self.calls[self._event_first :] if c.whole]
            for call in whole:
                call.complete = True
            text = bytes(self._call).decode("utf-8", errors="replace")
            rest = text[self._pos :].lstrip("}, \n") if whole else text  # after the block's whole calls
            if len(self.calls) == self._event_first + len(whole):
                self._content += rest.encode()
            else:
                self.cut_call = rest.strip()
            self._call = bytearray()
        self._release(final=True)

    @property
    def message_content(self) -> str:
        """The content of the whole (non-streamed) message: the content, then the text of a call the token limit
        cut after its name (a whole message holds complete calls only)."""
        return "\n".join(part for part in (self.content, self.cut_call) if part)

    @property
    def complete_calls(self) -> list[ToolCallOut]:
        """The calls the model finished writing."""
        return [c for c in self.calls if c.complete]

    @property
    def in_call(self) -> bool:
        """Whether the row stopped inside a call (cut by the token limit)."""
        return self._mode is Mode.TOOL

    def _release(self, *, final: bool) -> None:
        """Decode the content bytes that can no longer be a trigger or stop string and emit what is new."""
        data = bytes(self._content)
        upto = len(data) if final or self.kind in WHOLE else len(data) - held_back(data, self._holds)
        if upto > self._released:
            self._text += self._decoder.decode(data[self._released : upto], final=final)
            self._released = upto
        elif final:
            self._text += self._decoder.decode(b"", final=True)
        text = self._text
        if self.kind not in WHOLE:
            for s in self.stop:
                if s and s in text:
                    text = text[: text.index(s)]
            # trimmed, but an answer of whitespace only is what the model wrote: not lost at the end
            trimmed = text.strip()
            text = trimmed if trimmed or not final or self.calls else text
        if len(text) > len(self.content) and text.startswith(self.content):
            self._deltas.append({"content": text[len(self.content) :]})
            self.content = text

    def _scan(self, text: str) -> None:
        """Announce calls whose name is complete and stream their arguments as far as they are written."""
        while True:
            if self._args_at is None:
                m = CALL_HEAD.search(text, self._pos)
                if m is None:
                    return
                written = json.loads('"' + m.group(1) + '"')
                name = self._canonical.get(written, written)
                call = ToolCallOut(call_id(), name, custom=name in self._custom)
                self.calls.append(call)
                self._held = self._repeats_so_far(call)  # arguments empty: an earlier complete call of this tool
                if not self._held:
                    self._deltas.append(call.delta(len(self.calls) - 1, "", head=True))
                self._args_at = m.end()
            call = self.calls[-1]
            if call.custom:
                value, end = json_string_prefix(text, self._args_at)
                new = value[len(call.arguments) :]
            else:
                end = json_value_end(text, self._args_at)
                new = text[self._args_at + len(call.arguments) : len(text) if end is None else end]
            call.arguments += new
            if self._held and not self._repeats_so_far(call):
                self._announce_held()
            elif new and not self._held:
                self._deltas.append(call.delta(len(self.calls) - 1, new))
            if end is None:
                return
            call.whole = True
            if self._held:  # whole and still the text of an earlier call: a repeat, left out (the policy drops it)
                del self.calls[-1]
                self._held = False
            self._pos, self._args_at = end, None

    def _repeats_so_far(self, call: ToolCallOut) -> bool:
        """Whether the call's text so far begins that of an earlier whole call of the same tool (of an earlier
        block, or earlier in its own)."""
        return any(c is not call and (c.complete or c.whole) and c.name == call.name
                   and c.arguments.startswith(call.arguments) for c in self.calls)

    def _announce_held(self) -> None:
        """Announce the held call and stream its text so far (it is not a repeat after all)."""
        self._held = False
        call, index = self.calls[-1], len(self.calls) - 1
        self._deltas.append(call.delta(index, "", head=True))
        if call.arguments:
            self._deltas.append(call.delta(index, call.arguments))

    def _complete(self, event: CallEvent) -> None:
        """Mark the event's calls complete, checking that the streamed text says what the grammar parsed; a repeat
        still held is left out (one announced before it proved a repeat stays, as streamed)."""
        held, self._held = self._held, False
        if event.repeat:
            if held:
                del self.calls[-1]
            for out in self.calls[self._event_first :]:
                out.complete = True
        else:
            if held:
                self._announce_held()
            found, parsed = self.calls[self._event_first :], event.calls
            if event.error or len(found) != len(parsed):
                self.mismatches.append(event.error or f"{len(found)} calls streamed, {len(parsed)} parsed")
            for out, call in zip(found, parsed, strict=False):
                said = out.arguments if out.custom else json.loads(out.arguments or "null")
                if out.name != call.name or said != (call.input if out.custom else call.arguments):
                    self.mismatches.append(f"streamed {out.name} {out.arguments} but parsed {call.name}")
                out.complete = True
        self._call = bytearray()
        self._pos, self._args_at = 0, None
        self._event_first = len(self.calls)
