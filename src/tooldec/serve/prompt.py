"""Chat messages to prompt tokens through the model's own chat template, with tools and past calls.

What the template does with tools is probed once per model by the chat layer (`tooldec.chat.ChatTemplate`): a
template that does not render `tools` (SmolLM2's) gets the Hermes tool instructions in the system message; one
that does not render an assistant's `tool_calls` gets them written into the assistant's text in the model's own
call syntax, and one that ignores `tool` messages gets each result as a `<tool_response>` user turn.
"""

from __future__ import annotations

import json
from typing import Any

from tooldec.backends.loader import LoadedModel
from tooldec.chat import ChatTemplate, tool_instructions
from tooldec.chat.template import with_instructions
from tooldec.serve.errors import APIError
from tooldec.serve.protocol import Message, ToolCallIn
from tooldec.specs import ToolSet


def _text(message: Message, i: int) -> str | None:
    """A message's content as text; only text parts are accepted."""
    content = message.content
    if content is None:
        return None
    if isinstance(content, str):
        return _unicode(content, f"messages[{i}].content")
    parts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise APIError(
                f"content parts of type {part.type!r} are not supported (text only)",
                param=f"messages[{i}].content[{j}]",
                code="unsupported_content",
            )
        parts.append(_unicode(part.text, f"messages[{i}].content[{j}].text"))
    return "".join(parts)


def _unicode(text: str, param: str) -> str:
    """`text`, refused when it holds lone surrogates (JSON `\\ud800` escapes that are no character)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise APIError(f"the text is not valid Unicode: {exc.reason} at {exc.start}", param=param) from exc
    return text


def _past_call(tc: ToolCallIn, param: str) -> tuple[str, Any]:
    """(name, arguments) of an assistant's past call: a function's arguments as an object, a custom tool's input as
    its text (what the call's JSON holds, `tooldec.grammar.custom`); raises APIError naming the call."""
    if tc.type == "custom":
        if tc.custom is None:
            raise APIError('a custom tool call needs "custom": {"name", "input"}', param=f"{param}.custom")
        return tc.custom.name, tc.custom.input
    if tc.function is None:
        raise APIError('a function tool call needs "function": {"name", "arguments"}', param=f"{param}.function")
    try:
        args = json.loads(tc.function.arguments)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        raise APIError("tool call arguments must be a JSON object (as a string)", param=f"{param}.function.arguments")
    return tc.function.name, args


def template_messages(
    messages: list[Message], template: ChatTemplate, tools: ToolSet | None
) -> list[dict[str, Any]]:
    """The messages as the chat template takes them; raises APIError (naming the message) when malformed."""
    out: list[dict[str, Any]] = []
    call_ids: dict[str, str] = {}
    for i, m in enumerate(messages):
        text = _text(m, i)
        if m.role in ("system", "developer", "user"):
            if text is None:
                raise APIError(f"a {m.role} message needs content", param=f"messages[{i}].content")
            if m.tool_calls:
                raise APIError(f"a {m.role} message cannot have tool_calls", param=f"messages[{i}].tool_calls")
            out.append({"role": "system" if m.role == "developer" else m.role, "content": text})
        elif m.role == "assistant":
            calls = []
            for j, tc in enumerate(m.tool_calls or []):
                name, args = _past_call(tc, f"messages[{i}].tool_calls[{j}]")
                call_ids[tc.id] = name
                calls.append((tc.id, name, args))
            if text is None and not calls:
                raise APIError("an assistant message needs content or tool_calls", param=f"messages[{i}].content")
            if not calls:
                out.append({"role": "assistant", "content": text})
            elif template.renders_tool_calls:
                out.append({"role": "assistant", "content": text or "", "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                    for cid, name, args in calls
                ]})
            else:
                written = template.write_calls([(name, args) for _, name, args in calls])
                out.append({"role": "assistant", "content": (text + "\n" if text else "") + written})
        else:  # tool
            if text is None:
                raise APIError("a tool message needs content", param=f"messages[{i}].content")
            if not m.tool_call_id:
                raise APIError("a tool message needs tool_call_id", param=f"messages[{i}].tool_call_id")
            if m.tool_call_id not in call_ids:
                raise APIError(
                    f"tool_call_id {m.tool_call_id!r} answers no tool call of an earlier assistant message",
                    param=f"messages[{i}].tool_call_id",
                )
            name = call_ids[m.tool_call_id]
            if template.renders_tool_role:
                out.append({"role": "tool", "tool_call_id": m.tool_call_id, "name": name, "content": text})
            else:
                out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
    if tools is not None and not template.renders_tools:
        out = with_instructions(out, tool_instructions(tools))
    return out


def encode_prompt(
    lm: LoadedModel, template: ChatTemplate, messages: list[Message], tools: ToolSet | None
) -> list[int]:
    """Prompt token ids; raises APIError for malformed messages or ones the template refuses."""
    chat = template_messages(messages, template, tools)
    openai_tools = [t.to_openai() for t in tools] if tools is not None and template.renders_tools else None
    try:
        return lm.encode_chat(chat, tools=openai_tools)
    except Exception as exc:
        raise APIError(f"the model's chat template refused the messages: {exc}", param="messages") from exc
