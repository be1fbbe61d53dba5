"""Chat-template tool calls: the model's template renders the tools; its own call syntax is enforced.

The syntaxes, the template's probing, the tool instructions, the reading of calls and the policy of a round
come from the chat layer (`tooldec.chat`). Free text is untouched until the model opens a call; from there the
call is guided. `tool_choice` is "auto", "none", "required" or a tool name (which forces a call of that tool).
After each round the calls run, their results go back as `tool` messages, and the model answers or calls again;
a round that only repeats calls already answered is dropped and decoded again in the "answer" mode, where no
call can start, so the model answers from the results it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tooldec.agents.executor import ToolExecutor
from tooldec.agents.result import AgentResult
from tooldec.backends.loader import LoadedModel
from tooldec.chat import ChatTemplate, build_policy, call_turn, read_calls, tool_instructions
from tooldec.chat.policy import repeat_key, starts_a_call
from tooldec.decoding import FreeController, Policy, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.prefix import PromptPrefix
from tooldec.grammar.calls import ParsedCall


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
        _ = self.template

    @cached_property
    def template(self) -> ChatTemplate:
        """What the model's chat template does with tools (probed once), in the agent's syntax and layout."""
        return ChatTemplate.probe(self.lm.tokenizer, self.layout, self.syntax)

    def messages_for(self, question: str) -> list[dict[str, Any]]:
        """The opening messages: the tool instructions (when the template lacks them) and the question."""
        messages: list[dict[str, Any]] = []
        if not self.template.renders_tools:
            messages.append({"role": "system", "content": tool_instructions(self.executor.tools)})
        messages.append({"role": "user", "content": question})
        return messages

    def prompt_text(self, question: str) -> str:
        """The first round's prompt of `question` as text (every round's prompt starts the same way)."""
        return self.lm.render_chat(self.messages_for(question), tools=[t.to_openai() for t in self.executor.tools])

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt text as the rounds encode it: the template writes its own special tokens."""
        return self.lm.encode(text)

    def _policy(self, choice: str) -> Policy:
        """The round's policy: guided calls in the template's syntax, or the free baseline."""
        if not self.guided:
            return FreeController(self.lm.vocab, None)
        return build_policy(self.lm.compiler, self.executor.tools, choice, syntax=self.template.syntax)

    def run_many(self, questions: Sequence[str], *, prefix: PromptPrefix | None = None) -> list[AgentResult]:
        """Answer each question in turn; `prefix` is their prompts' shared start (the template's tool part)."""
        return [self.run(q, prefix=prefix) for q in questions]

    def run(self, question: str, *, prefix: PromptPrefix | None = None) -> AgentResult:
        """Chat rounds until the model answers without calling a tool, or `max_rounds`; every round starts from
        `prefix`'s state where its prompt starts with it.

        After tool results, a round whose calls were all made before (small models call the same tool again after
        its result, or again with its result as the number to work on: `repeat_key`), or that writes a call in a shape no trigger opens, is dropped, and the next round is decoded
        in the "answer" mode: no call can start, and the model answers from the results it has. The last round
        after results is decoded in that mode too."""
        if self.tool_choice not in ("auto", "none", "required") and self.tool_choice not in self.executor.tools:
            raise ValueError(f"tool_choice names an unknown tool {self.tool_choice!r}")
        template = self.template
        messages = self.messages_for(question)
        openai_tools = [t.to_openai() for t in self.executor.tools]
        totals = AgentResult(answer=None)
        choice = self.tool_choice
        decoder = Decoder(self.lm.model, self.lm.vocab)
        made: set[str] = set()
        for round_ in range(self.max_rounds):
            if made and round_ == self.max_rounds - 1:
                choice = "answer"  # the last round answers from the results it has
            gen = decoder.generate(
                [self.lm.encode_chat(messages, tools=openai_tools)],
                [self._policy(choice)],
                self.params,
                max_new_tokens=self.max_new_tokens,
                jump_forward=self.jump_forward,
                prefix=prefix,
                explain=self.explain,
            )[0]
            totals.add_cost(gen)
            totals.text += gen.text
            reading = read_calls(gen.text, template.syntax)
            calls: list[ParsedCall] = [call for event in gen.events for call in event.calls]
            totals.errors.extend(event.error for event in gen.events if event.error)
            if not self.guided:
                calls = reading.calls
                totals.errors.extend(reading.errors)
            if not calls:
                if made and choice != "answer" and self.guided and starts_a_call(gen.text):
                    choice = "answer"
                    continue
                totals.answer = gen.text.strip()
                break
            keys = {repeat_key(call.name, call.arguments) for call in calls}
            if keys <= made:
                choice = "answer"
                continue
            made |= keys
            if template.renders_tool_calls:
                turn = call_turn(reading.content, calls, first_id=len(totals.calls))
                ids: list[str | None] = [tool_call["id"] for tool_call in turn["tool_calls"]]
            else:  # the template would drop tool_calls: the model's own text carries them
                turn, ids = {"role": "assistant", "content": gen.text}, [None] * len(calls)
            messages.append(turn)
            for call, call_id in zip(calls, ids, strict=True):
                result = totals.record(self.executor.run(call))
                reply = {"role": "tool", "name": call.name, "content": result.observation()}
                messages.append(reply if call_id is None else {**reply, "tool_call_id": call_id})
            choice = "auto"
        return totals

