"""The chat layer, torch-free: call syntaxes, template probing, tool instructions, the one reader of calls and
the one builder of a request's policy. Agents, `tooldec serve`, the vLLM processor and the evaluation use it.
"""

from tooldec.chat.policy import (
    CallPlan,
    CallsOnly,
    ToolChoiceError,
    build_policy,
    plan_calls,
    resolve_tool_choice,
)
from tooldec.chat.reader import CallBlock, Reading, call_blocks, parse_call, parse_calls, read_calls
from tooldec.chat.syntax import CHAT_SYNTAXES, SYNTAXES, ChatSyntax, chat_syntax, detect_syntax
from tooldec.chat.template import ChatTemplate, call_turn, tool_instructions, write_calls

__all__ = [
    "CHAT_SYNTAXES",
    "SYNTAXES",
    "CallBlock",
    "CallPlan",
    "CallsOnly",
    "ChatSyntax",
    "ChatTemplate",
    "Reading",
    "ToolChoiceError",
    "build_policy",
    "call_blocks",
    "call_turn",
    "chat_syntax",
    "detect_syntax",
    "parse_call",
    "parse_calls",
    "plan_calls",
    "read_calls",
    "resolve_tool_choice",
    "tool_instructions",
    "write_calls",
]
