"""What a model's chat template does with tools, probed once, and the text written where it does nothing.

A template that does not render `tools` (SmolLM2's) gets the Hermes tool instructions in a system message; one
that does not render an assistant's `tool_calls` gets them written into the assistant's text in the model's
own call syntax; one that ignores `tool` messages gets each result as a `<tool_response>` user turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tooldec.chat.syntax import ChatSyntax, chat_syntax, detect_syntax
from tooldec.grammar.calls import ParsedCall
from tooldec.specs import ToolSpec

PROBE_TOOL = "zq_probe_tool"
"""A tool name no template writes unless it renders what was given to it."""
PROBE_RESULT = "zq_probe_result"
"""A tool result no template writes unless it renders `tool` messages."""


def _renders(tokenizer: Any, messages: list[dict[str, Any]], marker: str, **kwargs: Any) -> bool:
    """Whether the template writes `marker` when it renders `messages` (a template that raises does not)."""
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    except Exception:  # noqa: BLE001 -- a template that rejects the probe does not render it
        return False
    return isinstance(text, str) and marker in text


@dataclass(frozen=True)
class ChatTemplate:
    """What one model's chat template does with tools, and the call syntax it expects."""

    syntax: ChatSyntax
    renders_tools: bool
    renders_tool_calls: bool
    renders_tool_role: bool

    @classmethod
    def probe(cls, tokenizer: Any, layout: str = "compact", syntax: str | None = None) -> ChatTemplate:
        """Probe a tokenizer's template (a few renders); guided calls take `syntax` (the template's when None) in
        `layout` (raises ValueError where the syntax lacks it)."""
        tool = {"type": "function", "function": {"name": PROBE_TOOL, "description": "", "parameters": {}}}
        call = {"id": "call00000", "type": "function", "function": {"name": PROBE_TOOL, "arguments": {"x": 1}}}
        user: dict[str, Any] = {"role": "user", "content": "x"}
        with_call = [user, {"role": "assistant", "content": "", "tool_calls": [call]}]
        result = {"role": "tool", "tool_call_id": "call00000", "name": PROBE_TOOL, "content": PROBE_RESULT}
        return cls(
            chat_syntax(syntax or detect_syntax(tokenizer), layout),
            _renders(tokenizer, [user], PROBE_TOOL, tools=[tool]),
            _renders(tokenizer, with_call, PROBE_TOOL),
            _renders(tokenizer, [*with_call, result], PROBE_RESULT),
        )

    def write_calls(self, calls: Sequence[tuple[str, Any]]) -> str:
        """Past calls as the model writes them (canonical JSON whitespace, as the grammar does)."""
        return write_calls(self.syntax, calls)


def write_calls(syntax: ChatSyntax, calls: Sequence[tuple[str, Any]]) -> str:
    """(name, arguments) calls as text in `syntax` (what a template that drops `tool_calls` is given instead)."""
    if syntax.family == "python":
        return ", ".join(f"{name}({', '.join(f'{k}={_python(v)}' for k, v in args.items())})" for name, args in calls)
    key = "parameters" if syntax.family == "llama31" else "arguments"
    objs = [{"name": name, key: args} for name, args in calls]
    if syntax.family == "mistral":
        return "[TOOL_CALLS]" + json.dumps(objs, ensure_ascii=False)
    if syntax.family == "hermes":
        return "\n".join(f"<tool_call>\n{json.dumps(o, ensure_ascii=False)}\n</tool_call>" for o in objs)
    return "\n".join(json.dumps(o, ensure_ascii=False) for o in objs)


def _python(value: Any) -> str:
    """A JSON value as the Python literal a guided Python call spells (double-quoted strings)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_python(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def tool_instructions(tools: Iterable[ToolSpec]) -> str:
    """Tool instructions in the Hermes/Qwen style, for templates that do not render tools themselves."""
    tools = list(tools)
    listing = "\n".join(json.dumps(t.to_openai()) for t in tools)
    custom = any(t.custom for t in tools)
    return (
        "You may call one or more functions to assist with the user query.\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        + ("\nA custom tool takes one text input in its format instead: its arguments are that input as a JSON "
           "string." if custom else "")
    )


def with_instructions(messages: list[dict[str, Any]], instructions: str) -> list[dict[str, Any]]:
    """`messages` with `instructions` at the start of their system message (a new one when there is none)."""
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": instructions + "\n\n" + str(messages[0].get("content") or "")},
                *messages[1:]]
    return [{"role": "system", "content": instructions}, *messages]


def call_turn(content: str, calls: Sequence[ParsedCall], first_id: int = 0) -> dict[str, Any]:
    """The assistant message of a round that made `calls` after `content`, the calls as `tool_calls` (ids
    `call00000`, ... from `first_id`: nine characters, as Mistral's template wants), so that the next prompt shows
    them the way the template writes calls, whichever shape the model wrote."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"call{first_id + i:05d}", "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}
            for i, call in enumerate(calls)
        ],
    }
