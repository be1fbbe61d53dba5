"""Chat-template tool calls: the model's template renders the tools; its own call syntax is enforced.

Qwen/Hermes write `<tool_call>\\n{json}\\n</tool_call>` (several in one turn for parallel calls), Llama-3.1
writes a bare `{"name": …, "parameters": …}`, Mistral writes `[TOOL_CALLS]` and a JSON list. Free text is
untouched until the model opens a call; from there the call is guided. `tool_choice` is "auto", "none",
"required" or a tool name (which forces a call of that tool). After each round the calls run, their results
go back as `tool` messages, and the model answers or calls again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tooldec.agents.executor import ToolExecutor
from tooldec.agents.result import AgentResult
from tooldec.backends.loader import LoadedModel
from tooldec.decoding import CallController, FreeController, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.prefix import PromptPrefix
from tooldec.grammar.calls import (
    BARE_OPENING,
    CallParseError,
    ParsedCall,
    call_blocks,
    format_in_layout,
    get_format,
    with_aliases,
)
from tooldec.specs import ToolSet

FENCE_OPEN = "```json"
"""Qwen2.5-Coder writes its calls as a Markdown JSON block as often as between `<tool_call>` tags, and bare."""


@dataclass(frozen=True)
class ChatSyntax:
    """How one model family writes calls: the family's name, the text or token that opens a call (and `also`,
    others that open one too), whether several calls may follow each other in one turn, and the layout its
    guided JSON may take."""

    family: str
    trigger: str
    parallel: bool
    also: tuple[str, ...] = ()
    layout: str = "compact"

    @property
    def triggers(self) -> tuple[str, ...]:
        """Every text or token that opens a call, the one a required call forces first."""
        return (self.trigger, *self.also)

    @property
    def format(self) -> str:
        """The tooldec call format of this family in this layout (`hermes`, `hermes-lines`, `llama31`, ...)."""
        return format_in_layout(self.family, self.layout)

    def laid_out(self, layout: str) -> ChatSyntax:
        """This syntax with guided calls in `layout` (LAYOUTS); raises ValueError for a layout the family lacks."""
        format_in_layout(self.family, layout)
        return replace(self, layout=layout)


CHAT_SYNTAXES: dict[str, ChatSyntax] = {
    "hermes": ChatSyntax("hermes", "<tool_call>", parallel=True, also=(FENCE_OPEN, BARE_OPENING)),
    "llama31": ChatSyntax("llama31", '{"name": ', parallel=False),
    "mistral": ChatSyntax("mistral", "[TOOL_CALLS]", parallel=True),
}


def chat_syntax(family: str, layout: str = "compact") -> ChatSyntax:
    """The chat syntax of a model family (a key of CHAT_SYNTAXES) with its calls in `layout`; raises ValueError."""
    if family not in CHAT_SYNTAXES:
        raise ValueError(f"unknown call syntax {family!r}; known: {', '.join(CHAT_SYNTAXES)}")
    return CHAT_SYNTAXES[family].laid_out(layout)


def detect_syntax(tokenizer: Any) -> str:
    """The call syntax a model's chat template expects (Hermes when the template says nothing of tools)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):
        template = " ".join(template.values())
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "Environment: ipython" in template:
        return "llama31"
    return "hermes"


PROBE_TOOL = "zq_probe_tool"
"""A tool name no template writes unless it renders what was given to it."""


def _renders_probe(lm: LoadedModel, messages: list[dict[str, Any]], **kwargs: Any) -> bool:
    """Whether the chat template writes PROBE_TOOL when it renders `messages` (a template that raises does not)."""
    try:
        return PROBE_TOOL in lm.tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception:  # noqa: BLE001 -- a template that rejects the probe does not render it
        return False


def template_renders_tools(lm: LoadedModel) -> bool:
    """Whether the chat template puts the tools in the prompt (SmolLM2's, for one, ignores them)."""
    marker = {"type": "function", "function": {"name": PROBE_TOOL, "description": "", "parameters": {}}}
    return _renders_probe(lm, [{"role": "user", "content": "x"}], tools=[marker])


def template_renders_calls(lm: LoadedModel) -> bool:
    """Whether the chat template writes an assistant message's `tool_calls` (Qwen's does, in its own tags)."""
    call = {"id": "call00000", "type": "function", "function": {"name": PROBE_TOOL, "arguments": {}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    return _renders_probe(lm, [{"role": "user", "content": "x"}, turn])


def call_turn(text: str, calls: Sequence[ParsedCall], syntax: ChatSyntax, first_id: int = 0) -> dict[str, Any]:
    """The assistant message of a round that made `calls`: the text before the first call as its content and the
    calls as `tool_calls` (ids `call00000`, ... from `first_id`: nine characters, as Mistral's template wants),
    so that the next prompt shows them the way the template writes calls, whichever shape the model wrote."""
    starts = [i for trigger in syntax.triggers if (i := text.find(trigger)) >= 0]
    return {
        "role": "assistant",
        "content": text[: min(starts, default=len(text))].strip(),
        "tool_calls": [
            {"id": f"call{first_id + i:05d}", "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}
            for i, call in enumerate(calls)
        ],
    }


def hermes_system_prompt(tools: ToolSet) -> str:
    """Tool instructions in the Hermes/Qwen style, for templates that do not render tools themselves."""
    listing = "\n".join(json.dumps(t.to_openai()) for t in tools)
    return (
        "You may call one or more functions to assist with the user query.\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


@dataclass
class ChatAgent:
    """Answers through the chat template, running the calls the model makes; `guided=False` is the baseline."""

    lm: LoadedModel
    executor: ToolExecutor
    tool_choice: str = "auto"
    guided: bool = True
    jump_forward: bool = True
    params: SamplingParams = field(default_factory=SamplingParams)
    syntax: str | None = None
    layout: str = "compact"
    """How guided calls may be laid out (`tooldec.grammar.calls.LAYOUTS`)."""
    max_rounds: int = 4
    max_new_tokens: int = 256
    explain: bool = False
    """Record where guidance overrode the model (AgentResult.guided)."""

    def __post_init__(self) -> None:
        """Refuse a syntax or layout the agent cannot write calls in now, not at its first question."""
        chat_syntax(self.syntax or detect_syntax(self.lm.tokenizer), self.layout)

    def messages_for(self, question: str) -> list[dict[str, Any]]:
        """The opening messages: the tool instructions (when the template lacks them) and the question."""
        messages: list[dict[str, Any]] = []
        if not template_renders_tools(self.lm):
            messages.append({"role": "system", "content": hermes_system_prompt(self.executor.tools)})
        messages.append({"role": "user", "content": question})
        return messages

    def prompt_text(self, question: str) -> str:
        """The first round's prompt of `question` as text (every round's prompt starts the same way)."""
        return self.lm.render_chat(self.messages_for(question), tools=[t.to_openai() for t in self.executor.tools])

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt text as the rounds encode it: the template writes its own special tokens."""
        return self.lm.encode(text)

    def _controller(self, tools: ToolSet, syntax: ChatSyntax, choice: str) -> CallController:
        grammar = self.lm.compiler.compile(tools, with_aliases(syntax.format, tools))
        return CallController(
            grammar,
            trigger=syntax.triggers,
            tool_choice=choice,  # type: ignore[arg-type]
            after_call="text" if syntax.parallel else "stop",
        )

    def run_many(self, questions: Sequence[str], *, prefix: PromptPrefix | None = None) -> list[AgentResult]:
        """Answer each question in turn; `prefix` is their prompts' shared start (the template's tool part)."""
        return [self.run(q, prefix=prefix) for q in questions]

    def run(self, question: str, *, prefix: PromptPrefix | None = None) -> AgentResult:
        """Chat rounds until the model answers without calling a tool, or `max_rounds`; every round starts from
        `prefix`'s state where its prompt starts with it.

        A round whose calls were all made before (small models call the same tool again after its result) is
        dropped, and the next round is decoded with tool_choice "none": the model has its results and answers."""
        syntax = chat_syntax(self.syntax or detect_syntax(self.lm.tokenizer), self.layout)
        messages = self.messages_for(question)
        openai_tools = [t.to_openai() for t in self.executor.tools]
        totals = AgentResult(answer=None)
        choice = self.tool_choice
        decoder = Decoder(self.lm.model, self.lm.vocab)
        made: set[str] = set()
        as_calls = template_renders_calls(self.lm)
        for _ in range(self.max_rounds):
            tools = self.executor.tools
            mode = choice
            if choice not in ("auto", "none", "required"):
                if choice not in tools:
                    raise ValueError(f"tool_choice names an unknown tool {choice!r}")
                tools, mode = ToolSet([tools[choice]]), "required"
            ctrl: CallController | FreeController = (
                self._controller(tools, syntax, mode) if self.guided else FreeController(self.lm.vocab, None)
            )
            gen = decoder.generate(
                [self.lm.encode_chat(messages, tools=openai_tools)],
                [ctrl],
                self.params,
                max_new_tokens=self.max_new_tokens,
                jump_forward=self.jump_forward,
                prefix=prefix,
                explain=self.explain,
            )[0]
            totals.add_cost(gen)
            totals.text += gen.text
            calls = [call for event in gen.events for call in event.calls]
            totals.errors.extend(event.error for event in gen.events if event.error)
            if not self.guided:
                calls, parse_errors = parse_free_calls(gen.text, syntax)
                totals.errors.extend(parse_errors)
            if not calls:
                totals.answer = gen.text.strip()
                break
            keys = {json.dumps([call.name, call.arguments], sort_keys=True, default=str) for call in calls}
            if keys <= made:
                choice = "none"
                continue
            made |= keys
            if as_calls:
                turn = call_turn(gen.text, calls, syntax, first_id=len(totals.calls))
                ids = [tool_call["id"] for tool_call in turn["tool_calls"]]
            else:  # the template would drop tool_calls: the model's own text carries them
                turn, ids = {"role": "assistant", "content": gen.text}, [None] * len(calls)
            messages.append(turn)
            for call, call_id in zip(calls, ids, strict=True):
                result = totals.record(self.executor.run(call))
                reply = {"role": "tool", "name": call.name, "content": result.observation()}
                messages.append(reply if call_id is None else {**reply, "tool_call_id": call_id})
            choice = "auto"
        return totals


def parse_free_calls(text: str, syntax: ChatSyntax) -> tuple[list[ParsedCall], list[str]]:
    """Best-effort reading of calls in freely decoded text (the baseline): parsed calls and parse errors."""
    fmt = get_format(syntax.format)
    calls: list[ParsedCall] = []
    errors: list[str] = []
    if syntax.family == "hermes":  # tags, Markdown JSON blocks and bare objects: the shapes the grammar takes
        for block in call_blocks(text):
            try:
                calls.append(fmt.parse("<tool_call>\n" + block.json.strip() + "\n</tool_call>"))
            except CallParseError as exc:
                errors.append(str(exc))
        return calls, errors
    start = text.find(syntax.trigger) if syntax.trigger in text else -1
    if start < 0:
        return [], []
    body = text[start + (len(syntax.trigger) if syntax.family == "mistral" else 0) :].strip()
    try:
        parse_all = getattr(fmt, "parse_all", None)
        calls = parse_all(body) if parse_all else [fmt.parse(body)]
    except CallParseError as exc:
        errors.append(str(exc))
    return calls, errors
