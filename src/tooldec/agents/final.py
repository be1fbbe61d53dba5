"""The final answer of an agent run in a structure (`tooldec run --output-schema | --output-regex`).

After the agent has reasoned and called its tools, one more decoding asks the model for the answer alone, given
the question, the run's text and its calls' results, guided by the output type: the answer is valid by
construction (JSON valid under the schema, or text matching the regex) and its value is parsed.
"""

from __future__ import annotations

import json
from typing import Any

from tooldec.agents.result import AgentResult
from tooldec.backends.loader import LoadedModel
from tooldec.decoding.sampling import SamplingParams
from tooldec.structured import Generator, JsonSchema, Regex


def answer_request(question: str, result: AgentResult, output: JsonSchema | Regex) -> str:
    """The request for the final answer: the question, what the run wrote and found, and the form to answer in."""
    lines = [f"Question: {question}"]
    if result.text:
        lines.append(f"Work so far:\n{result.text}")
    for call in result.calls:
        lines.append(f"Tool {call.name}({json.dumps(call.arguments)}) returned {call.observation()}")
    if result.answer is not None:
        lines.append(f"Answer found: {result.answer}")
    if isinstance(output, JsonSchema):
        form = f"as JSON valid under this JSON Schema: {json.dumps(output.schema)}"
    else:
        form = f"as text matching the regular expression {output.pattern}"
    lines.append(f"Give the final answer only, {form}.")
    return "\n\n".join(lines)


def structured_answer(
    lm: LoadedModel, output: JsonSchema | Regex, question: str, result: AgentResult, *,
    params: SamplingParams | None = None, max_new_tokens: int = 256,
) -> Any:
    """Decode the final answer of `result` guided by `output`: sets `result.answer` to its text and `result.value`
    to its value (parsed JSON, or the text), counts its cost, and returns the value. The request goes through the
    model's chat template where it has one. Raises IncompleteOutputError when `max_new_tokens` run out first."""
    request = answer_request(question, result, output)
    prompt: Any = [{"role": "user", "content": request}] if getattr(lm.tokenizer, "chat_template", None) else (
        request + "\nFinal answer: ")
    generator = Generator(lm, output)
    gen = generator.generations([prompt], max_new_tokens=max_new_tokens, params=params)[0]
    result.add_cost(gen)
    result.value = generator.value(gen, max_new_tokens)
    result.answer = gen.events[0].text
    return result.value
