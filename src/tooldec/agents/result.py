"""What an agent run gives back: the answer, every call with its result, the text and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tooldec.agents.executor import ToolResult
from tooldec.agents.explain import GuidedStep, guided_steps
from tooldec.decoding.decoder import Generation


@dataclass
class AgentResult:
    """One question answered with tools."""

    answer: str | None
    calls: list[ToolResult] = field(default_factory=list)
    text: str = ""
    tokens: int = 0
    seconds: float = 0.0
    model_seconds: float = 0.0
    guidance_seconds: float = 0.0
    forward_passes: int = 0
    forced_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    guided: list[GuidedStep] = field(default_factory=list)
    """Guided steps, when the agent explains (positions count the tokens of every decoding run in turn)."""
    value: Any = None
    """The answer's value when it was asked in a structure (`agents.final.structured_answer`): the parsed JSON of
    a schema, the text of a regex."""

    def record(self, result: ToolResult) -> ToolResult:
        """Keep a call's result; a failed call's error also joins `errors`. Returns `result`."""
        self.calls.append(result)
        if not result.ok:
            self.errors.append(result.error or "")
        return result

    def add_cost(self, gen: Generation) -> None:
        """Count one decoding run's tokens, time, forward passes and guided steps into this result (agents may
        run several)."""
        self.guided += guided_steps(gen.extra.get("guided_steps", ()), offset=self.tokens)
        self.tokens += gen.sampled_tokens + gen.forced_tokens
        self.seconds += gen.seconds
        self.model_seconds += gen.model_seconds
        self.guidance_seconds += gen.guidance_seconds
        self.forward_passes += gen.forward_passes
        self.forced_tokens += gen.forced_tokens

    def to_dict(self) -> dict[str, Any]:
        """The `tooldec run --json` object."""
        return {
            "answer": self.answer,
            "value": self.value,
            "calls": [c.to_dict() for c in self.calls],
            "text": self.text,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "forward_passes": self.forward_passes,
            "forced_tokens": self.forced_tokens,
            "errors": self.errors,
        }
