"""ReAct for multi-step tool use: a `Thought:` line of free text, then a guided `Action:` / `Action Input:` call.

Guided, the format is enforced as ToolDec's ReAct FSM does (seed 001, §4.2): the model thinks freely on the
Thought line, and when the line ends (or it writes `Action:`) the action follows: `Action: `, an existing tool
name (or `Finish`), a newline, `Action Input: ` and a JSON object valid for that tool. The text may not end
before `Finish`. The tool runs and its result comes back as `Observation:`; `Finish` ends the run with its
`answer`. A step limit bounds the loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tooldec.agents.executor import ToolExecutor
from tooldec.agents.inline import inline_controller
from tooldec.agents.result import AgentResult
from tooldec.backends.loader import LoadedModel
from tooldec.decoding import CallEvent, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.prefix import PromptPrefix
from tooldec.grammar.calls import ReactCall
from tooldec.specs import ToolSet, ToolSpec

FINISH = ToolSpec(
    "Finish",
    "End the task and give the final answer.",
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
)
THOUGHT_ENDS = ("Action:", "\n")
"""What opens a guided action: the model writing `Action:`, or the end of its Thought line."""
CALL_END = re.compile(r"Action: *[^\n]+\nAction Input: *\{.*\}\n$", re.DOTALL)


def describe_tools(tools: ToolSet, *, with_parameters: bool = True) -> str:
    """One line per tool: name, description and (optionally) its parameters' JSON Schema."""
    lines = []
    for tool in tools:
        line = f"- {tool.name}: {tool.description}".rstrip(": ")
        if with_parameters:
            line += f" Parameters: {json.dumps(tool.parameters.get('properties', {}))}"
        lines.append(line)
    return "\n".join(lines)


def react_prompt(question: str, tools: ToolSet) -> str:
    """The ReAct instructions, the tools (with Finish) and the question, ending where the first Thought starts."""
    return (
        "Answer the question by using tools. Use this format:\n"
        "Thought: what to do next\n"
        "Action: the tool to use, one of [" + ", ".join(tools.names) + "]\n"
        'Action Input: the arguments as a JSON object, e.g. {"a": 1}\n'
        "Observation: the tool's result\n"
        "... (Thought/Action/Action Input/Observation can repeat)\n"
        'When you know the answer: Action: Finish and Action Input: {"answer": "..."}\n\n'
        f"Tools:\n{describe_tools(tools)}\n\nQuestion: {question}\nThought:"
    )


@dataclass
class ReactAgent:
    """Answers a question in ReAct steps; `guided=False` decodes freely and parses actions best-effort."""

    lm: LoadedModel
    executor: ToolExecutor
    guided: bool = True
    jump_forward: bool = True
    params: SamplingParams = field(default_factory=SamplingParams)
    max_steps: int = 6
    explain: bool = False
    """Record where guidance overrode the model (AgentResult.guided)."""
    max_new_tokens: int = 512
    prompt_builder: Callable[[str, ToolSet], str] = react_prompt

    def run(self, question: str) -> AgentResult:
        """Loop Thought → Action → Observation until Finish or the step limit."""
        return self.run_many([question])[0]

    def run_many(self, questions: Sequence[str], *, prefix: PromptPrefix | None = None) -> list[AgentResult]:
        """Answer several questions in one batch (one row each); `prefix` is their prompts' shared start."""
        tools = ToolSet([*self.executor.tools, FINISH])
        controllers = [
            inline_controller(
                self.lm.compiler,
                tools,
                ReactCall(),
                guided=self.guided,
                trigger=THOUGHT_ENDS,
                call_end=CALL_END,
                max_calls=self.max_steps,
                stop=("\nObservation:", "\nQuestion:"),
                end_in_text=False,
            )
            for _ in questions
        ]
        out = [AgentResult(None) for _ in questions]

        def on_call(row: int, event: CallEvent) -> str | None:
            if event.error or not event.calls:
                out[row].errors.append(event.error or "no call")
                return "Observation: Error: the action could not be read\nThought:"
            call = event.calls[0]
            if call.name == FINISH.name:
                final = call.arguments.get("answer")
                out[row].answer = None if final is None else str(final)
                return None
            result = out[row].record(self.executor.run(call))
            return f"Observation: {result.observation()}\nThought:"

        gens = Decoder(self.lm.model, self.lm.vocab).generate(
            [self.lm.tokenizer.encode(self.prompt_builder(q, self.executor.tools)) for q in questions],
            controllers,
            self.params,
            max_new_tokens=self.max_new_tokens,
            jump_forward=self.jump_forward,
            on_call=on_call,
            prefix=prefix,
            explain=self.explain,
        )
        for gen, result in zip(gens, out, strict=True):
            result.text = gen.text.strip()
            result.add_cost(gen)
        return out
