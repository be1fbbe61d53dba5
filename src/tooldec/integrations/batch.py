"""Per-request tool guidance in a serving engine's persistent batch, independent of the engine.

A request carries its tools as one string entry of its extra arguments, `{"tooldec": "<JSON>"}` (vLLM: the
OpenAI request body's `vllm_xargs`, or `SamplingParams.extra_args`); the JSON object holds

- `tools`: OpenAI tools (or bare functions, MCP tools), as in the Chat Completions request, custom tools with a
  Lark or regex `format` included (Hermes syntax: a custom call's input is its JSON string, `tooldec.grammar.custom`);
- `tool_choice`: "auto" (default), "none", "required" or `{"type": "function" | "custom", "function" | "custom":
  {"name": ...}}`;
- `parallel_tool_calls` (default true), and optionally `syntax` ("hermes", "llama31", "mistral": the model's
  call syntax, detected from its chat template when absent), `layout` ("compact" or "lines": whether a guided
  call's JSON may also be pretty-printed, Hermes only; the factory's default when absent) and `max_calls`.

A request guided by a context-free grammar instead carries its text as `{"tooldec_grammar": "<Lark or GBNF>"}`
(plain strings, as `vllm_xargs` values are), with `"tooldec_grammar_syntax": "lark" | "gbnf"` where the dialect
should not be read from the text (GBNF when a line defines a rule with `::=`, Lark otherwise); the whole answer
is then a sentence of the grammar. A JSON Schema, a regex or a choice guides the whole answer the same way (the
output types of `tooldec.structured`): `{"tooldec_json": "<schema as JSON text>"}`, `{"tooldec_regex": "<pattern>"}`
or `{"tooldec_choice": ["a", "b"]}`. A request carries tools or one of these, not two.

`tool_payload(...)`, `grammar_payload(...)` and `output_payload(key, value)` write these entries; `read_request`
reads any of them. `PolicyFactory` turns a request into its policy (one per model: it holds the compiler, whose
compiled tool sets and grammars are cached) through the chat layer's one builder (`tooldec.chat.plan_calls`), as
`tooldec serve`, the agents and the evaluation do; `tooldec.chat.call_blocks` finds the calls in text (for the vLLM
tool parser, which names them by `name_aliases`).
`PolicyBatch` keeps one policy per batch row and
follows the engine's batch updates (removed, then added, then moved); before each sampling step it feeds every
row the tokens generated since the last step, then fills the packed masks of the rows that mask something in one
call of the compiled core and applies them in place (`tooldec.decoding.sampling.mask_rows`, as tooldec's own loops
do). A row added at an index always
replaces what was there, so no state leaks from one request to the next one in the same slot.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from tooldec.chat import (
    SYNTAXES,
    CallsOnly,
    ChatSyntax,
    ToolChoiceError,
    chat_syntax,
    detect_syntax,
    plan_calls,
)
from tooldec.chat.policy import resolve_tool_choice
from tooldec.compiler import Compiler
from tooldec.decoding.controller import CallController, FreeController, MaskSource
from tooldec.errors import GrammarError, TokenRejectedError, ToolDecError
from tooldec.grammar.calls import LAYOUTS
from tooldec.grammar.cfg import load_grammar, sniff_syntax
from tooldec.specs import ToolSet, from_openai_tools
from tooldec.structured import OutputType, structured_output

log = logging.getLogger("tooldec.integrations")

PAYLOAD_KEY = "tooldec"
"""The key of the request's extra arguments that holds its tool payload (a JSON string)."""

GRAMMAR_KEY = "tooldec_grammar"
"""The key of the request's extra arguments that holds a grammar guiding the whole answer (its text)."""

GRAMMAR_SYNTAX_KEY = "tooldec_grammar_syntax"
"""The key naming the grammar's dialect, "lark" or "gbnf" (read from the text when absent)."""

GRAMMAR_SYNTAXES = ("lark", "gbnf")
"""Dialects a grammar may be written in."""

OUTPUT_KEYS = {"tooldec_json": "json", "tooldec_regex": "regex", "tooldec_choice": "choice"}
"""The keys of the request's extra arguments that hold a JSON Schema (its JSON text), a regex or a choice (a list
of strings) guiding the whole answer, and the `structured_outputs` key each stands for."""


class ToolRequestError(ValueError):
    """A request's tool payload is malformed: bad JSON, bad tools, an unknown named tool, a bad tool_choice.

    A ValueError, so that vLLM answers it with HTTP 400."""


@dataclass(frozen=True)
class ToolRequest:
    """What one request asks of tooldec: its tools, the tool_choice mode, parallel calls, the call syntax.

    `mode` is "auto", "none" or "required"; a named tool_choice is mode "required" with `named` set."""

    tools: ToolSet
    mode: str = "auto"
    named: str | None = None
    parallel: bool = True
    syntax: str | None = None
    max_calls: int | None = None
    layout: str | None = None

    @property
    def call_tools(self) -> ToolSet:
        """The tools a call may use: all of them, or only the named one."""
        return ToolSet([self.tools[self.named]]) if self.named is not None else self.tools

    @classmethod
    def from_payload(cls, payload: str | Mapping[str, Any]) -> ToolRequest:
        """Read a payload (the JSON string, or the object). Raises ToolRequestError naming the problem."""
        return _parse_payload(payload) if isinstance(payload, str) else _parse_object(payload)

    @classmethod
    def from_extra_args(cls, extra_args: Mapping[str, Any] | None) -> ToolRequest | None:
        """The request in a request's extra arguments, or None when it carries no tooldec payload."""
        if not extra_args or PAYLOAD_KEY not in extra_args:
            return None
        payload = extra_args[PAYLOAD_KEY]
        if not isinstance(payload, str):
            raise ToolRequestError(f"extra argument {PAYLOAD_KEY!r} must be a JSON string")
        return cls.from_payload(payload)


@dataclass(frozen=True)
class GrammarRequest:
    """A request whose whole answer is a sentence of a context-free grammar: its text and dialect."""

    text: str
    syntax: Literal["lark", "gbnf"]

    @classmethod
    def from_extra_args(cls, extra_args: Mapping[str, Any] | None) -> GrammarRequest | None:
        """The grammar in a request's extra arguments, or None when it carries none. Raises ToolRequestError
        for a grammar that is not a string, an unknown dialect, or a grammar together with tools."""
        if not extra_args or (GRAMMAR_KEY not in extra_args and GRAMMAR_SYNTAX_KEY not in extra_args):
            return None
        text = extra_args.get(GRAMMAR_KEY)
        if not isinstance(text, str):
            raise ToolRequestError(f"extra argument {GRAMMAR_KEY!r} must be the grammar's text (a string)")
        if PAYLOAD_KEY in extra_args:
            raise ToolRequestError(f"a request carries tools ({PAYLOAD_KEY!r}) or a grammar ({GRAMMAR_KEY!r}), "
                                   "not both")
        syntax = extra_args.get(GRAMMAR_SYNTAX_KEY) or sniff_syntax(text)
        if syntax not in GRAMMAR_SYNTAXES:
            raise ToolRequestError(f"unknown grammar syntax {syntax!r}; known: {', '.join(GRAMMAR_SYNTAXES)}")
        return cls(text, cast(Literal["lark", "gbnf"], syntax))


@dataclass(frozen=True)
class OutputRequest:
    """A request whose whole answer is a JSON value valid under a schema, a regex's match or one of some choices:
    the `structured_outputs` key it stands for and its output type."""

    key: str
    output: OutputType

    @classmethod
    def from_extra_args(cls, extra_args: Mapping[str, Any] | None) -> OutputRequest | None:
        """The schema, regex or choice in a request's extra arguments, or None when it carries none. Raises
        ToolRequestError for two of them, one with tools or a grammar, or a value of the wrong kind (a schema
        that is not JSON text of an object, a choice that is not a list of strings)."""
        given = [k for k in OUTPUT_KEYS if k in (extra_args or {})]
        if not extra_args or not given:
            return None
        others = given[1:] + [k for k in (PAYLOAD_KEY, GRAMMAR_KEY) if k in extra_args]
        if others:
            raise ToolRequestError(f"a request carries one of {PAYLOAD_KEY!r}, {GRAMMAR_KEY!r} and "
                                   f"{', '.join(map(repr, OUTPUT_KEYS))}, not {given[0]!r} and {others[0]!r}")
        key = OUTPUT_KEYS[given[0]]
        try:
            return cls(key, structured_output(key, extra_args[given[0]]))
        except ToolDecError as exc:
            raise ToolRequestError(f"extra argument {given[0]!r}: {exc}") from None


def read_request(extra_args: Mapping[str, Any] | None) -> ToolRequest | GrammarRequest | OutputRequest | None:
    """What a request's extra arguments ask of tooldec: tools, a grammar, a schema, regex or choice, or nothing
    (None).

    Raises ToolRequestError for a malformed payload."""
    return (OutputRequest.from_extra_args(extra_args) or GrammarRequest.from_extra_args(extra_args)
            or ToolRequest.from_extra_args(extra_args))


def output_payload(key: Literal["json", "regex", "choice"], value: Any) -> dict[str, Any]:
    """The extra-arguments entry that guides a request's whole answer by a JSON Schema (a dict, written as JSON
    text), a regex or a choice (a list of strings), as `structured_outputs.<key>` would. Raises ToolDecError for a
    value of the wrong kind."""
    structured_output(key, value)  # refuses a value of the wrong kind here, not in the engine
    if key == "json" and not isinstance(value, str):
        value = json.dumps(value)
    elif key == "choice":
        value = list(value)
    return {f"tooldec_{key}": value}


def grammar_payload(text: str, syntax: Literal["lark", "gbnf"] | None = None) -> dict[str, str]:
    """The extra-arguments entries that guide a request's whole answer by a grammar (`syntax` read from the
    text when None). Pass them as the request body's `vllm_xargs` or `SamplingParams(extra_args=...)`."""
    payload = {GRAMMAR_KEY: text}
    if syntax is not None:
        payload[GRAMMAR_SYNTAX_KEY] = syntax
    return payload


@functools.lru_cache(maxsize=256)
def check_grammar(text: str, syntax: Literal["lark", "gbnf"]) -> None:
    """Read a grammar and build its terminals' automata (no vocabulary needed), so that a grammar tooldec cannot
    guide is refused before the request runs. Raises GrammarError (a ValueError naming the line and column)."""
    from tooldec import _core
    from tooldec.automaton.compile import compile_dfas

    grammar = load_grammar(text, syntax)
    try:
        compile_dfas([t.node for t in grammar.terminals])
    except _core.AutomatonTooLarge as exc:
        raise GrammarError(f"a terminal's automaton is too large: {exc}") from None


def tool_payload(
    tools: Any,
    tool_choice: Any = "auto",
    *,
    parallel_tool_calls: bool | None = True,
    syntax: str | None = None,
    max_calls: int | None = None,
    layout: str | None = None,
) -> dict[str, str]:
    """The extra-arguments entry that asks tooldec to guide a request's calls: `{"tooldec": "<JSON>"}`.

    Pass it as the request body's `vllm_xargs` (OpenAI server) or `SamplingParams(extra_args=...)`."""
    body: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice}
    if parallel_tool_calls is not None:
        body["parallel_tool_calls"] = parallel_tool_calls
    if syntax is not None:
        body["syntax"] = syntax
    if max_calls is not None:
        body["max_calls"] = max_calls
    if layout is not None:
        body["layout"] = layout
    return {PAYLOAD_KEY: json.dumps(body, ensure_ascii=False, separators=(",", ":"))}


@functools.lru_cache(maxsize=256)
def _parse_payload(payload: str) -> ToolRequest:
    """Parse a payload string (cached: the same tools come back request after request)."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ToolRequestError(f"extra argument {PAYLOAD_KEY!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ToolRequestError(f"extra argument {PAYLOAD_KEY!r} must hold a JSON object")
    return _parse_object(data)


def _parse_object(data: Mapping[str, Any]) -> ToolRequest:
    """Check and convert the payload object."""
    unknown = set(data) - {"tools", "tool_choice", "parallel_tool_calls", "syntax", "max_calls", "layout"}
    if unknown:
        raise ToolRequestError(f"unknown tooldec payload field(s): {', '.join(sorted(unknown))}")
    raw_tools = data.get("tools")
    if not isinstance(raw_tools, list) or not raw_tools:
        raise ToolRequestError("tooldec payload needs a non-empty list of tools")
    try:
        tools = ToolSet(from_openai_tools(raw_tools))
    except ToolDecError as exc:
        raise ToolRequestError(f"invalid tools: {exc}") from None
    try:
        mode, named = resolve_tool_choice(data.get("tool_choice", "auto"), tools)
    except ToolChoiceError as exc:
        raise ToolRequestError(str(exc)) from None
    parallel = data.get("parallel_tool_calls", True)
    if parallel is None:
        parallel = True
    if not isinstance(parallel, bool):
        raise ToolRequestError("parallel_tool_calls must be true or false")
    syntax = data.get("syntax")
    if syntax is not None and syntax not in SYNTAXES:
        raise ToolRequestError(f"unknown call syntax {syntax!r}; known: {', '.join(SYNTAXES)}")
    max_calls = data.get("max_calls")
    if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 1):
        raise ToolRequestError("max_calls must be a positive integer")
    layout = data.get("layout")
    if layout is not None and layout not in LAYOUTS:
        raise ToolRequestError(f"unknown call layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return ToolRequest(tools, mode, named, parallel, syntax, max_calls, layout)


def request_syntax(request: ToolRequest, syntax: str, layout: str) -> ChatSyntax:
    """The chat syntax a request's calls take: its own syntax and layout, else the model's `syntax` and the
    default `layout`. Raises ToolRequestError for a layout the syntax lacks."""
    try:
        return chat_syntax(request.syntax or syntax, request.layout or layout)
    except ValueError as exc:
        raise ToolRequestError(str(exc)) from None


@functools.lru_cache(maxsize=256)
def check_compiles(payload: str, syntax: str, layout: str = "compact") -> None:
    """Build the call automaton of a payload's function tools (no vocabulary needed) in the syntax and layout its
    calls take (`request_syntax`), and read its custom tools' grammars, so that a schema tooldec cannot enforce
    (an unsupported keyword, no valid value), a custom tool's bad grammar or regex, or custom tools in a syntax of
    listed calls are refused before the request runs. Raises ToolRequestError. Cached per payload."""
    from tooldec.automaton.compile import KeyLanguage, compile_dfa
    from tooldec.automaton.dfa import DEAD
    from tooldec.grammar.calls import get_format, tools_grammar
    from tooldec.grammar.custom import input_grammar, json_call_pieces

    request = ToolRequest.from_payload(payload)
    fmt = get_format(request_syntax(request, syntax, layout).format)
    functions = [t for t in request.call_tools if not t.custom]
    try:
        for tool in request.call_tools:
            if tool.input_format is not None:
                json_call_pieces(fmt)
                input_grammar(tool.input_format, tool.name)
        if not functions:
            return
        dfa = compile_dfa(tools_grammar(functions, fmt, decide=KeyLanguage))
    except ToolDecError as exc:
        raise ToolRequestError(f"tooldec cannot enforce these tools: {exc}") from None
    if dfa.start == DEAD:
        raise ToolRequestError("no call of these tools can be valid (their schemas admit no value)")


class PolicyFactory:
    """Makes the policy of one request on one model: the compiler (shared, cached) and the model's call syntax."""

    def __init__(self, compiler: Compiler, syntax: str = "hermes", layout: str = "compact") -> None:
        """`syntax` is the model's call syntax and `layout` how its calls may be laid out (a request may name
        others). Raises ValueError for an unknown syntax or a layout it lacks."""
        chat_syntax(syntax, layout)
        self.compiler = compiler
        self.prepared = compiler.prepared
        self.syntax = syntax
        self.layout = layout

    @classmethod
    def from_hf(cls, tokenizer: Any, *, vocab_size: int | None = None, syntax: str | None = None,
                layout: str = "compact") -> PolicyFactory:
        """The factory of a Hugging Face tokenizer; `vocab_size` is the model's logits width; the syntax is read
        from the chat template when not given."""
        from tooldec.vocab import Vocabulary

        vocab = Vocabulary.from_hf(tokenizer, vocab_size=vocab_size)
        return cls(Compiler(vocab), syntax or detect_syntax(tokenizer), layout)

    def policy(self, request: ToolRequest | GrammarRequest | OutputRequest) -> CallController | CallsOnly | FreeController:
        """A fresh policy for one request: the whole answer guided by its grammar, or guided calls of its tools in
        its syntax and tool_choice mode (`tooldec.chat.plan_calls`: a required call with parallel calls gets a
        CallsOnly, calls back to back, then EOS; one call a `<tool_call>` block, which vLLM's Hermes parser reads,
        and a required answer opens with the tag)."""
        if isinstance(request, GrammarRequest):
            return CallController(self.compiler.compile_grammar(request.text, request.syntax))
        if isinstance(request, OutputRequest):
            return CallController(request.output.compile(self.compiler))
        choice = {"function": {"name": request.named}} if request.named is not None else request.mode
        plan = plan_calls(request.tools, choice, syntax=request_syntax(request, self.syntax, self.layout),
                          parallel=request.parallel, max_calls=request.max_calls, hermes_reader=True)
        return plan.policy(plan.compile(self.compiler))


class _EosOnly:
    """The policy of a row that must end now (its tools could not be compiled): only EOS is allowed."""

    def __init__(self, eos_mask: np.ndarray) -> None:
        self._mask = eos_mask

    def mask_source(self) -> MaskSource:
        return self._mask


@dataclass
class _Row:
    """One request in the batch: its policy, the engine's live list of its output tokens, how many of them the
    policy has taken, and whether guidance was given up (a token the mask did not allow was sampled)."""

    request: ToolRequest | GrammarRequest | OutputRequest
    policy: CallController | CallsOnly | FreeController | _EosOnly
    output: Sequence[int]
    seen: int = 0
    off: bool = False


class PolicyBatch:
    """The per-row policies of a persistent batch, kept in step with the engine's batch updates."""

    def __init__(self, factory: PolicyFactory, *, logger: logging.Logger | None = None) -> None:
        """Rows start empty; `add` gives a row its request. Problems go to `logger` (default tooldec's)."""
        self.factory = factory
        self.log = logger or log
        self.rows: dict[int, _Row] = {}
        self._buffer = np.zeros((0, factory.prepared.words), dtype=np.int32)
        self._warned_async = False

    def __len__(self) -> int:
        return len(self.rows)

    def remove(self, row: int) -> None:
        """The request at `row` left the batch."""
        self.rows.pop(row, None)

    def add(self, row: int, extra_args: Mapping[str, Any] | None, output: Sequence[int]) -> None:
        """A request took `row` (replacing whatever was there). `output` is the engine's live list of its
        generated tokens (non-empty when a preempted request comes back); requests without tools or a grammar,
        and those whose policy never masks, are not guided (they cost nothing per step)."""
        self.rows.pop(row, None)
        request: ToolRequest | GrammarRequest | OutputRequest | None
        try:
            request = read_request(extra_args)
        except ToolRequestError as exc:  # validate_params refuses these; never fail the whole batch here
            self.log.error("tooldec: request at row %d not guided: %s", row, exc)
            return
        if request is None:
            return
        policy: CallController | CallsOnly | FreeController | _EosOnly
        try:
            policy = self.factory.policy(request)
        except Exception as exc:  # noqa: BLE001 -- the engine step must go on for the other rows
            self.log.error("tooldec: cannot compile the tools or grammar of the request at row %d, ending it: %s",
                           row, exc)
            policy = _EosOnly(self.factory.prepared.eos_mask)
        if isinstance(policy, FreeController):  # it never masks (python calls, tool_choice none): nothing to feed
            return
        self.rows[row] = _Row(request, policy, output)

    def move(self, a: int, b: int, *, swap: bool) -> None:
        """The request at `a` moved to `b` (replacing what was there); with `swap`, the one at `b` moved to `a`."""
        at_a = self.rows.pop(a, None)
        at_b = self.rows.pop(b, None)
        if at_a is not None:
            self.rows[b] = at_a
        if swap and at_b is not None:
            self.rows[a] = at_b

    def update(
        self,
        removed: Iterable[int],
        added: Iterable[tuple[int, Any, Any, Sequence[int]]],
        moved: Iterable[tuple[int, int, Any]],
    ) -> None:
        """Apply one batch update in vLLM's order: removed, then added `(row, params, prompt_ids, output_ids)`
        (the params' `extra_args` carry the payload), then moved `(a, b, direction)` (a direction named SWAP
        exchanges the two rows, any other moves a to b)."""
        for row in removed:
            self.remove(row)
        for row, params, _prompt, output in added:
            self.add(row, getattr(params, "extra_args", None), output)
        for a, b, direction in moved:
            self.move(a, b, swap=getattr(direction, "name", direction) == "SWAP")

    def sync(self) -> None:
        """Feed every guided row the tokens generated since the last step."""
        for index, row in self.rows.items():
            if row.off or isinstance(row.policy, _EosOnly):
                continue
            output = row.output
            while row.seen < len(output):
                token = output[row.seen]
                if token < 0:  # a placeholder of an asynchronous step, not sampled yet
                    if not self._warned_async:
                        self._warned_async = True
                        self.log.warning(
                            "tooldec: a sampled token is not visible yet (asynchronous scheduling), so a mask "
                            "may lag one token; in vLLM pass --logits-processors "
                            "tooldec.integrations.vllm:ToolDecLogitsProcessor (it keeps output tokens "
                            "current for logits processors) or --no-async-scheduling"
                        )
                    break
                try:
                    row.policy.accept_token(int(token))
                except TokenRejectedError as exc:
                    row.off = True
                    self.log.error(
                        "tooldec: row %d sampled a token its mask did not allow (%s); its guidance stops. "
                        "Another constraint on the same request (min_tokens, allowed_token_ids, a structured "
                        "output) can exclude every token tooldec allows.", index, exc,
                    )
                    break
                row.seen += 1

    def apply(self, logits: Any) -> Any:
        """Sync, then mask the guided rows of the `[B, V]` logits in place (`mask_rows`: one fill of the compiled
        core, one kernel; rows whose policy masks nothing, and rows past B, are left out); returns `logits`."""
        if not self.rows:
            return logits
        self.sync()
        batch = logits.shape[0]
        rows = [i for i, r in self.rows.items() if not r.off and i < batch]
        if rows:
            from tooldec.decoding.sampling import mask_rows

            if self._buffer.shape[0] < batch:
                self._buffer = np.zeros((max(batch, 2 * self._buffer.shape[0]), self._buffer.shape[1]), np.int32)
            mask_rows([self.rows[i].policy for i in rows], logits, self._buffer[:batch], rows)
        return logits
