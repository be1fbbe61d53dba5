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

# One example per tool, written for tooldec (none is a FuncQA question). Each answer names the operation in
# words before the call ("Add 1245 and 2380:"): that is where the model picks the tool. Numbers written with
# thousands separators in a question are written without them (the call separates its arguments with commas).
# No answer writes the arithmetic itself before the call: after `3.14*123=` the model kept writing digits past
# the tool's result (386.228).
EXAMPLES = """\
Q: A farm picked 1,245 apples on Monday and 2,380 apples on Tuesday. How many apples did it pick in total?
A: Add 1245 and 2380: <add>(1245,2380)=3625 apples. So, the answer is 3625.

Q: A shop had 12,450.5 dollars and paid a bill of 3,875.25 dollars. How much money does it have left?
A: Subtract 3875.25 from 12450.5: <subtract>(12450.5,3875.25)=8575.25 dollars. So, the answer is 8575.25.

Q: A concert ticket costs 2.35 dollars. How much do 17 tickets cost?
A: Multiply the price by the number of tickets: <multiply>(2.35,17)=39.95 dollars. So, the answer is 39.95.

Q: A ribbon 45.6 meters long is cut into 8 equal pieces. How long is each piece?
A: Divide the length by the number of pieces: <divide>(45.6,8)=5.7 meters. So, the answer is 5.7.

Q: A savings account grows by 3% every year. How many times larger is it after 9 years?
A: Raise 1.03 to the power of 9: <power>(1.03,9)=1.304773 times. So, the answer is 1.304773.

Q: A square field has an area of 2,704 square meters. How long is each side?
A: Take the square root of 2704: <sqrt>(2704)=52 meters. So, the answer is 52.

Q: What is the base-10 logarithm of 5,000?
A: Take the base-10 logarithm of 5000: <log>(5000)=3.69897. So, the answer is 3.69897.

Q: What is the natural logarithm of 20?
A: Take the natural logarithm: <ln>(20)=2.995732. So, the answer is 2.995732.

Q: Three lights blink every 4, 6 and 10 seconds. They blink together now. After how many seconds do they next blink together?
A: Take the least common multiple of the periods: <lcm>(4,6,10)=60 seconds. So, the answer is 60.

Q: A teacher splits 48 pencils and 36 erasers into identical kits with nothing left over. At most how many kits can she make?
A: Take the greatest common divisor of the counts: <gcd>(48,36)=12 kits. So, the answer is 12.

Q: 100 candies are shared equally among 7 children. How many candies are left over?
A: Take the remainder of 100 divided by 7: <remainder>(100,7)=2 candies. So, the answer is 2.

Q: A club picks 3 of its 10 members for a committee. How many different committees are possible?
A: Choose 3 of 10 people, order does not matter: <choose>(10,3)=120 committees. So, the answer is 120.

Q: In how many ways can 9 runners take the first, second, third and fourth places?
A: Arrange 4 of 9 runners, order matters: <permutate>(9,4)=3024 ways. So, the answer is 3024.
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
