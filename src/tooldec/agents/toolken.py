"""ToolkenGPT-style inline calls (FuncQA): free text, `<` opens a call, the tool's result follows `=`.

In text mode the model writes freely; once it writes `<`, only tool names can follow (the name trie), then
`>(`, numbers in the tool's arity, and `)=`. The tool runs, its result is appended after `=`, and decoding
returns to text mode. Without guidance the same prompt is decoded freely and calls are read best-effort.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tooldec.agents.answer import extract_answer
from tooldec.agents.executor import ToolExecutor, format_value
from tooldec.agents.inline import inline_controller
from tooldec.agents.result import AgentResult
from tooldec.backends.loader import LoadedModel
from tooldec.decoding import CallEvent, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.decoding.prefix import PromptPrefix
from tooldec.grammar.calls import ToolkenCall

CALL_END = re.compile(r"<([A-Za-z_][\w.\-]*)>\(([^()]*)\)=$")
STOPS = ("\n",)  # every few-shot answer is one line

EXAMPLES = """\
Q: A shop sold 215 apples in the morning and 378 in the afternoon. How many apples did it sell in total?
A: <add>(215,378)=593. So, the answer is 593.

Q: A man had 789.4 dollars and spent 11.99 dollars. How much money does he have left?
A: <subtract>(789.4,11.99)=777.41. So, the answer is 777.41.

Q: A box holds 24 bottles. How many bottles are in 17 boxes?
A: <multiply>(24,17)=408. So, the answer is 408.

Q: A rope of 12.6 meters is cut into 4 equal pieces. How long is each piece?
A: <divide>(12.6,4)=3.15. So, the answer is 3.15.

Q: If an investment grows by 5% a year, how many times larger is it after 7 years?
A: <power>(1.05,7)=1.4071. So, the answer is 1.4071.

Q: A square garden has an area of 50 square meters. How long is one side?
A: <sqrt>(50)=7.0711. So, the answer is 7.0711.
"""


def toolken_prompt(question: str, tool_names: list[str]) -> str:
    """A few-shot prompt that shows the `<tool>(args)=result` syntax, then the question."""
    names = ", ".join(f"<{n}>" for n in tool_names)
    return f"Answer the following questions with {names}:\n\n{EXAMPLES}\nQ: {question}\nA:"


@dataclass
class ToolkenAgent:
    """Answers a question with inline tool calls; `guided=False` is the unconstrained baseline."""

    lm: LoadedModel
    executor: ToolExecutor
    guided: bool = True
    jump_forward: bool = True
    params: SamplingParams = field(default_factory=SamplingParams)
    explain: bool = False
    """Record where guidance overrode the model (AgentResult.guided)."""
    max_new_tokens: int = 96
    max_calls: int = 8

    def run(self, question: str, *, prompt: str | None = None) -> AgentResult:
        """Decode an answer to `question` (or to a ready `prompt`), running every call the model writes."""
        return self.run_many([question], prompts=None if prompt is None else [prompt])[0]

    def run_many(
        self,
        questions: Sequence[str],
        *,
        prompts: Sequence[str] | None = None,
        prefix: PromptPrefix | None = None,
    ) -> list[AgentResult]:
        """Answer several questions in one batch (one row each); `prefix` is their prompts' shared start."""
        names = list(self.executor.tools.names)
        texts = list(prompts) if prompts is not None else [toolken_prompt(q, names) for q in questions]
        if len(texts) != len(questions):
            raise ValueError(f"{len(questions)} questions but {len(texts)} prompts")
        controllers = [
            inline_controller(
                self.lm.compiler,
                self.executor.tools,
                ToolkenCall(),
                guided=self.guided,
                trigger="<",
                call_end=CALL_END,
                max_calls=self.max_calls,
                stop=STOPS,
            )
            for _ in texts
        ]
        out = [AgentResult(None) for _ in texts]

        def on_call(row: int, event: CallEvent) -> str:
            if event.error or not event.calls:
                out[row].errors.append(event.error or "no call")
                return "?"
            result = out[row].record(self.executor.run(event.calls[0]))
            return format_value(result.result) if result.ok else "?"

        gens = Decoder(self.lm.model, self.lm.vocab).generate(
            [self.lm.tokenizer.encode(text) for text in texts],
            controllers,
            self.params,
            max_new_tokens=self.max_new_tokens,
            jump_forward=self.jump_forward,
            on_call=on_call,
            prefix=prefix,
            explain=self.explain,
        )
        for gen, result in zip(gens, out, strict=True):
            answer_text = gen.text
            for stop in STOPS:
                answer_text = answer_text.split(stop)[0]
            result.answer, result.text = extract_answer(answer_text), answer_text.strip()
            result.add_cost(gen)
        return out
