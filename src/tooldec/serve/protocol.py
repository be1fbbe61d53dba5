"""The request body of `POST /v1/chat/completions` (a subset of OpenAI's, checked by pydantic) and the
response objects, streamed or not.

Fields OpenAI defines that this server does not implement are refused with a 400 when they would change the
answer (`n` > 1, `logprobs`, penalties other than 0), and ignored when they would not (`user`, `metadata`).
vLLM's `structured_outputs` is read for its `json`, `regex`, `choice` or `grammar` (the openai client sends it
through `extra_body`). `tools` holds function tools and OpenAI's custom tools (`{"type": "custom", "custom":
{"name", "description", "format"}}`, their format read by `tooldec.specs.from_openai_tools`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_STOP = 4


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCallIn(_Model):
    """A call an assistant message made: the tool's name and its arguments as a JSON string."""

    name: str
    arguments: str = "{}"


class CustomCallIn(_Model):
    """A call of a custom tool an assistant message made: the tool's name and its text input."""

    name: str
    input: str = ""


class ToolCallIn(_Model):
    """One entry of an assistant message's `tool_calls`: a function call, or a custom tool's (`type` "custom")."""

    id: str
    type: Literal["function", "custom"] = "function"
    function: FunctionCallIn | None = None
    custom: CustomCallIn | None = None


class ContentPart(_Model):
    """A part of a message's content; only text parts are supported."""

    type: str
    text: str | None = None


class Message(_Model):
    """A chat message: system/developer/user text, an assistant turn (text and/or tool calls), a tool result."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Model):
    """A tool's function: its name, description and JSON Schema parameters."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomDef(_Model):
    """A custom tool: its name, description and input `format` (text, or a Lark or regex grammar)."""

    name: str
    description: str | None = None
    format: dict[str, Any] | None = None


class Tool(_Model):
    """One entry of `tools`: a function tool, or a custom tool (`type` "custom"), whose call carries one text input
    in the tool's format."""

    type: Literal["function", "custom"]
    function: FunctionDef | None = None
    custom: CustomDef | None = None

    @model_validator(mode="after")
    def _has_its_definition(self) -> Tool:
        """The member named by `type` is given."""
        if getattr(self, self.type) is None:
            raise ValueError(f'a {self.type} tool needs "{self.type}"')
        return self


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    """`{"type": "function", "function": {"name": ...}}`: a call of that tool is required."""

    type: Literal["function"]
    function: NamedFunction


class NamedCustomChoice(_Model):
    """`{"type": "custom", "custom": {"name": ...}}`: a call of that custom tool is required."""

    type: Literal["custom"]
    custom: NamedFunction


class JsonSchemaFormat(_Model):
    """The `json_schema` member of a `response_format` of type json_schema."""

    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Model):
    """`{"type": "text" | "json_object" | "json_schema", "json_schema": {...}}`."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(BaseModel):
    """vLLM's `structured_outputs`: one of `{"json": <JSON Schema or its text>}`, `{"grammar": "<Lark or GBNF
    text>"}`, `{"regex": "<pattern>"}` (the whole answer matches it, Python `re.fullmatch` syntax) or
    `{"choice": ["a", "b"]}` guides the whole answer.

    Its other keys are kept (`model_extra`) so that the plan can refuse the ones not supported by name."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    grammar: str | None = None
    regex: str | None = None
    choice: list[str] | None = None


class StreamOptions(_Model):
    include_usage: bool = False


class ChatCompletionRequest(_Model):
    """The body of `POST /v1/chat/completions`."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = Field(default=None, min_length=1)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | NamedCustomChoice | None = None
    parallel_tool_calls: bool = True
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    n: int = Field(default=1, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    user: str | None = None
    tooldec_answer: bool = False
    """tooldec's own (the client's `extra_body`): after tool results, a turn that only repeats calls already
    answered (the same tools and arguments but for numbers, `tooldec.chat.policy.repeat_key`) is decoded again
    with no call allowed, so the model answers from the results it has."""


def completion_id() -> str:
    """A fresh `chatcmpl-…` id."""
    return "chatcmpl-" + uuid.uuid4().hex


def call_id() -> str:
    """A fresh `call_…` id for a tool call."""
    return "call_" + uuid.uuid4().hex[:24]


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The `usage` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    id: str,
    model: str,
    created: int,
    content: str | None,
    tool_calls: list[dict[str, Any]],
    finish_reason: str,
    usage_: dict[str, int],
) -> dict[str, Any]:
    """A whole (non-streamed) `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage_,
    }


def chunk(
    id: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None
) -> dict[str, Any]:
    """One `chat.completion.chunk` of a stream."""
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def now() -> int:
    """Seconds since the epoch, as `created` holds them."""
    return int(time.time())
