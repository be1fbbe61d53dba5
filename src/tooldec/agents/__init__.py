"""Agents: loops that let a model call tools, run them and read their results (ToolkenGPT, ReAct, chat)."""

from tooldec.agents.call import generate_call
from tooldec.agents.executor import ToolExecutor, ToolResult
from tooldec.agents.result import AgentResult

__all__ = ["AgentResult", "ToolExecutor", "ToolResult", "generate_call"]
