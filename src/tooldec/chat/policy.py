"""One request's tools, `tool_choice` and `parallel_tool_calls` as one sequence's policy: the one builder.

The agents, `tooldec serve`, the vLLM processor and the evaluation all come here:

- `tool_choice` "auto": free text until one of the syntax's triggers (Hermes/Qwen: `<tool_call>`, a ```` ```json ````
  block, a bare `{"name": "`), then a guided call; "required": calls only, the first opened by any of the
  syntax's triggers as the model chooses (one trigger: it is forced); a named tool: only that tool, one call;
  "none": the first trigger is banned (a ```` ```json ```` block stays content); "answer" (tooldec's own, after
  tool results): every call shape is banned and the answer may not be empty, so the model writes its answer in
  text.
- A call may name a tool by a unique word-aligned suffix of its name (`with_aliases`, over all the tools).
- With `parallel` (the default, as in OpenAI's API) the next call may follow in every shape the syntax allows:
  Hermes returns to text, where any trigger opens the next call, and a `<tool_call>` block or a fence holds
  several calls, `,\n`, `\n` or `, ` apart, as Qwen2.5-Coder writes them; Llama 3.1 writes one object or a JSON list,
  and another may follow; Mistral's and Python's lists hold up to `max_calls` calls. A required call with
  parallel calls is `CallsOnly`: after a call, only whitespace, the next call or the end. Without `parallel`, one
  call, then the sequence stops.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from tooldec.automaton.dfa import DEAD
from tooldec.cfg_guide import CompiledCfg
from tooldec.chat.syntax import ChatSyntax
from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.decoding.controller import (
    CallController,
    FreeController,
    MaskSource,
    Mode,
    accept_in_turn,
    fill_bitmasks,
)
from tooldec.decoding.trigger import Respelled, Triggers
from tooldec.errors import TokenRejectedError
from tooldec.grammar.calls import CallFormat, ParallelCalls, Wrapped, get_format, with_aliases
from tooldec.index import PreparedVocab, TokenIndex
from tooldec.specs import ToolSet

MODES: tuple[str, ...] = ("auto", "none", "required", "answer")
PARALLEL_MAX_CALLS = 8
"""Calls one answer may make with parallel calls unless the request says otherwise."""
ANSWER_BANS: tuple[str, ...] = ("{", '"name"', "'name'", "<tool_call>", "```json", "[TOOL_CALLS]")
"""What the answer mode bans besides the syntax's triggers: the start of a call in any shape, also one no trigger
opens. After a tool result Qwen2.5-Coder wrote its call again as `{"name": 'get_weather'` (a single quote), and
with `"name":` banned as `{"name" "get_weather"` (no colon): so no `{` at all, the start of every JSON call."""


def starts_a_call(text: str) -> bool:
    """Whether `text` starts a call in some shape (ANSWER_BANS), opened by a trigger or not."""
    return any(ban in text for ban in ANSWER_BANS)


def repeat_key(name: str, arguments: Any) -> str:
    """What makes a call the same as an earlier one after its result: its tool and its arguments but for their
    numbers (a model that calls `convert_currency(amount=46.3, ...)` with the 46.3 its first call returned repeats
    it)."""

    def masked(value: Any) -> Any:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float):
            return "<number>"
        if isinstance(value, list):
            return [masked(v) for v in value]
        if isinstance(value, dict):
            return {k: masked(v) for k, v in value.items()}
        return str(value)

    return json.dumps([name, masked(arguments)], sort_keys=True)


class ToolChoiceError(ValueError):
    """A tool_choice that is not auto, none, required or a named tool of the request."""


def resolve_tool_choice(choice: Any, tools: ToolSet) -> tuple[str, str | None]:
    """(mode, named tool) of an OpenAI tool_choice: a mode string, a tool's name, `{"type": "function",
    "function": {"name": ...}}` (`{"type": "custom", "custom": {...}}`) or None ("auto"). Raises
    ToolChoiceError."""
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice in MODES:
            return choice, None
        if choice in tools:
            return "required", choice
        raise ToolChoiceError(f"tool_choice must be auto, none, required or a named function, not {choice!r}")
    function = getattr(choice, "function", None) or getattr(choice, "custom", None)
    if isinstance(choice, Mapping):
        function = choice.get("function", choice.get("custom"))
        name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
    else:
        name = getattr(function, "name", None)
    if not isinstance(name, str):
        raise ToolChoiceError('a named tool_choice is {"type": "function", "function": {"name": ...}} '
                              '(or "custom" for a custom tool)')
    if name not in tools:
        raise ToolChoiceError(f"tool_choice names {name!r}, which is not one of the tools ({', '.join(tools.names)})")
    return "required", name


@dataclass(frozen=True)
class CallPlan:
    """What a request's calls are: all its tools (for aliases), the tools a call may use, the syntax, the mode,
    whether several calls may follow, how many, and the call format (aliases included)."""

    tools: ToolSet
    call_tools: ToolSet
    syntax: ChatSyntax
    mode: str
    parallel: bool
    max_calls: int
    format: CallFormat
    any_opening: bool = True
    """Whether a required answer may open with any of the syntax's triggers (else the first is forced)."""

    @property
    def after_call(self) -> Literal["stop", "text"]:
        """What follows a finished call: text (where the next call may open) or the end (a list holds them all)."""
        return "text" if self.parallel and not (self.syntax.listed and self.syntax.family != "llama31") else "stop"

    def compile(self, compiler: Compiler) -> CompiledGrammar | CompiledCfg:
        """The call grammar (cached by the compiler; slow the first time for a tool set): with a custom tool among
        the tools a call may use, the pushdown guide's grammar of all their calls (`Compiler.compile_custom_calls`),
        else the automaton of the calls."""
        if any(t.custom for t in self.call_tools):
            return compiler.compile_custom_calls(self.call_tools, self.format)
        return compiler.compile(self.call_tools, self.format)

    def policy(self, grammar: CompiledGrammar | CompiledCfg, *, stop: tuple[str, ...] = ()) -> CallController | CallsOnly | FreeController:
        """A fresh policy for one sequence over the compiled call grammar."""
        triggers = self.syntax.triggers
        if not triggers:  # the whole answer is calls (the python syntax)
            if self.mode in ("none", "answer"):
                return FreeController(grammar.prepared.vocab, None, stop=stop)
            return CallController(grammar, after_call="stop", max_calls=1, stop=stop)
        trigger: Sequence[str | Respelled] = triggers
        if self.mode == "none":
            trigger = triggers[:1]
        elif self.mode == "answer":
            trigger = tuple(dict.fromkeys((*triggers, *ANSWER_BANS)))
        choose = self.mode == "required" and self.any_opening and len(triggers) > 1  # the model picks the shape
        mode = "none" if self.mode == "answer" else "auto" if choose else self.mode
        controller = CallController(
            grammar,
            trigger=trigger,
            tool_choice=mode,  # type: ignore[arg-type]
            after_call=self.after_call,
            max_calls=self.max_calls if self.after_call == "text" else 1,
            stop=stop,
            text_first=self.mode == "answer",
        )
        if self.mode == "required" and (self.after_call == "text" or choose):
            opening = gap_index(grammar.prepared, triggers, first=True) if choose else None
            return CallsOnly(controller, gap_index(grammar.prepared, triggers), opening)
        return controller


def plan_calls(tools: ToolSet, tool_choice: Any = "auto", *, syntax: ChatSyntax, parallel: bool = True,
               max_calls: int | None = None, hermes_reader: bool = False) -> CallPlan:
    """The plan of a request's calls (see the module's rules); raises ToolChoiceError for a bad tool_choice.
    `hermes_reader=True` where another reader parses the output, one JSON object between `<tool_call>` tags
    (vLLM's Hermes parser): one call a block, and a required answer opens with the tag."""
    mode, named = resolve_tool_choice(tool_choice, tools)
    call_tools = ToolSet([tools[named]]) if named is not None else tools
    parallel = parallel and syntax.parallel and named is None
    limit = max_calls or (PARALLEL_MAX_CALLS if parallel else 1)
    fmt = get_format(syntax.format)
    if isinstance(fmt, ParallelCalls):
        fmt = replace(fmt, max_calls=limit)
    elif isinstance(fmt, Wrapped) and parallel and not hermes_reader:
        fmt = replace(fmt, several=True)
    return CallPlan(tools, call_tools, syntax, mode, parallel, limit, with_aliases(fmt, tools),
                    any_opening=not hermes_reader)


def build_policy(compiler: Compiler, tools: ToolSet, tool_choice: Any = "auto", *, syntax: ChatSyntax,
                 parallel: bool = True, max_calls: int | None = None,
                 stop: tuple[str, ...] = ()) -> CallController | CallsOnly | FreeController:
    """One sequence's policy for a request's tools (compiled by `compiler`, cached); raises ToolChoiceError."""
    plan = plan_calls(tools, tool_choice, syntax=syntax, parallel=parallel, max_calls=max_calls)
    return plan.policy(plan.compile(compiler), stop=stop)


GAP_SPACE = 2
"""Whitespace characters (newlines, spaces) a required answer may write between its calls."""
_GAPS: weakref.WeakKeyDictionary[PreparedVocab, dict[tuple[object, ...], TokenIndex]] = weakref.WeakKeyDictionary()


def gap_index(prepared: PreparedVocab, triggers: tuple[str | Respelled, ...], *, first: bool = False) -> TokenIndex:
    """The token index of what may follow a required call: a little whitespace, then the next call's trigger (any
    of them) or the end; with `first`, of what opens a required answer: any trigger. A trigger that is a control
    token of the vocabulary is left to the caller (`CallsOnly`: it has no text here, and spelled as text it would
    open no call). Built once per vocabulary and triggers."""
    gaps = _GAPS.setdefault(prepared, {})
    key = (triggers, first)
    gap = gaps.get(key)
    if gap is None:
        from tooldec.automaton.compile import compile_dfa
        from tooldec.grammar.ir import Repeat, alt, lit, opt, seq

        specials = prepared.vocab.special_ids
        texts = [t.text if isinstance(t, Respelled) else t for t in triggers]
        opening = alt(*(lit(t) for t in texts if t not in specials))
        space = Repeat(alt(lit("\n"), lit(" ")), 0, GAP_SPACE)
        gap = gaps[key] = TokenIndex(compile_dfa(opening if first else seq(space, opt(opening))), prepared)
    return gap


class CallsOnly:
    """The policy of an answer that must call (tool_choice required) with parallel calls or a choice of openings:
    calls back to back, then EOS.

    Wraps a CallController that returns to text after each call. With an `opening` index the answer opens with
    any of the syntax's triggers, as the model chooses (the controller is in "auto" mode and the opening's mask
    keeps it to triggers): forcing the first would take the model's shape away (Qwen2.5-Coder, made to open a
    `<tool_call>` tag, ends after one call where it writes its parallel calls in one ```` ```json ```` fence).
    After a call only a little whitespace, the next call's trigger or EOS may follow, as in vLLM's structural tag
    for required Hermes calls: text there would be lost anyway (a Hermes parser keeps the content before the
    first call), and free text let SmolLM2 ramble after its call until max_tokens."""

    def __init__(self, controller: CallController, gap: TokenIndex, opening: TokenIndex | None = None) -> None:
        """`gap` is the token index of what may stand between calls, `opening` of what opens the answer, if the
        controller does not force its first trigger (`gap_index`)."""
        self.controller = controller
        self._gap = gap
        self._opening = opening
        self._at: tuple[TokenIndex, int] | None = None  # (gap or opening, its state) while outside calls, else None
        self._history: list[tuple[TokenIndex, int] | None] = []
        trigger = controller.trigger
        members = trigger.members if isinstance(trigger, Triggers) else [trigger] if trigger is not None else []
        self._specials = [t.token_id for t in members if t.token_id is not None]
        """Triggers that are control tokens (Qwen's `<tool_call>`): no bytes the gap could spell, allowed where
        the gap may end and where the answer opens."""
        self.reset()

    def __getattr__(self, name: str) -> Any:
        """The controller's attributes (tokens, events, mode, trigger, grammar, ...)."""
        return getattr(self.controller, name)

    @property
    def done(self) -> bool:
        """Whether the sequence is finished."""
        return self.controller.done

    def mask_source(self) -> MaskSource:
        """The gap's (or the opening's) state outside calls, else the controller's mask."""
        at = self._at
        if at is not None and not self.controller.done:
            index, state = at
            if not self._specials or not self._special_here(at):
                return (index.core, state)
            return self.controller.prepared.mask(("calls-gap", id(index), state), lambda: self._with_specials(at))
        return self.controller.mask_source()

    def _special_here(self, at: tuple[TokenIndex, int]) -> bool:
        """Whether a control-token trigger may come at `at`: where the answer opens, or where the gap may end
        (only whitespace written since the call)."""
        index, state = at
        return state == index.start if index is self._opening else index.is_accepting(state)

    def _with_specials(self, at: tuple[TokenIndex, int]) -> np.ndarray:
        """The index's packed mask at `at` with the control-token triggers added."""
        out = at[0].bitmask(at[1])
        for token in self._specials:
            out[token >> 5] |= np.uint32(1 << (token & 31)).view(np.int32)
        return out

    def fill_bitmask(self, out: np.ndarray, row: int = 0) -> None:
        """Write the packed mask of the tokens allowed next into row `row` of an `int32[B, W]` array."""
        fill_bitmasks([self], out, [row])

    def forced(self) -> list[int]:
        """The controller's forced tokens inside a call; none between calls."""
        return [] if self._at is not None else self.controller.forced()

    def accept_token(self, token_id: int) -> Any:
        """Take a token (TokenRejectedError if the gap, the opening or the controller refuses it)."""
        at = self._at
        if at is not None and not self.controller.done:
            index, state = at
            nxt = index.next_state(state, token_id)
            if token_id in self._specials and self._special_here(at):
                nxt = state  # the controller opens the next call
            if nxt == DEAD:
                tb = self.controller.vocab.token_bytes
                raise TokenRejectedError(token_id, state, tb[token_id] if 0 <= token_id < len(tb) else None)
            at = (index, nxt)
        event = self.controller.accept_token(token_id)
        self._history.append(self._at)
        if event is not None and self.controller.mode is Mode.TEXT:
            at = (self._gap, self._gap.start)  # a call just ended: the gap begins
        elif self.controller.mode is not Mode.TEXT:
            at = None  # in the next call (or done)
        self._at = at
        return event

    def accept_tokens(self, tokens: Sequence[int]) -> list[Any]:
        """Take several tokens in turn; all or none (see accept_in_turn)."""
        return accept_in_turn(self, tokens)

    def validate_tokens(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the first, would be accepted in turn (the policy is left as it was)."""
        n = 0
        for token in tokens:
            try:
                self.accept_token(token)
            except TokenRejectedError:
                break
            n += 1
        self.rollback(n)
        return n

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` accepted tokens."""
        self.controller.rollback(n)
        for _ in range(n):
            self._at = self._history.pop()

    def stop(self) -> None:
        """End the sequence now."""
        self.controller.stop()

    def inject(self, tokens: list[int]) -> None:
        """Tokens the caller appends in text mode (see CallController.inject)."""
        self.controller.inject(tokens)

    def is_terminated(self) -> bool:
        """Whether the sequence is finished (only EOS may follow)."""
        return self.controller.is_terminated()

    def reset(self) -> None:
        """Back to the start of the sequence."""
        self.controller.reset()
        opening = self._opening
        self._at = (opening, opening.start) if opening is not None else None
        self._history = []
