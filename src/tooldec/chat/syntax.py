"""Chat call syntaxes: how each model family writes its calls, and which one a chat template expects.

Qwen/Hermes write `<tool_call>\\n{json}\\n</tool_call>` (Qwen2.5-Coder also a Markdown ```` ```json ```` block or a
bare object; several in one turn for parallel calls), Llama-3.1 writes a bare `{"name": …, "parameters": …}`
or a JSON list of them, Mistral writes `[TOOL_CALLS]` and a JSON list, and the `python` syntax writes calls as
Python, `f(a=1), g(b=2)`, with no opening at all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tooldec.decoding.trigger import Respelled
from tooldec.grammar.calls import BARE_OPENING, format_in_layout

FENCE_OPEN = "```json"
"""Qwen2.5-Coder writes its calls as a Markdown JSON block as often as between `<tool_call>` tags, and bare."""

LIST_OPENING = "[" + BARE_OPENING
"""What opens a JSON list of calls written bare (Llama 3.1's parallel calls)."""

PRETTY_BARE_OPENINGS: tuple[Respelled, ...] = tuple(
    Respelled("{\n" + " " * indent + '"name": "', BARE_OPENING) for indent in (2, 4)
)
"""A bare call pretty-printed, as Qwen2.5-Coder writes about half its bare objects (indented 2, rarely 4): it opens
a call as the compact opening does, so that no call escapes guidance by its layout; the rest follows the layout."""


@dataclass(frozen=True)
class ChatSyntax:
    """How one model family writes calls: the family's name, the text or token that opens a call (and `also`,
    others that open one too; none for a syntax whose whole answer is calls), whether several calls may follow
    each other in one turn, whether they come as one list (the call's grammar holds them all), and the layout
    its guided JSON may take."""

    family: str
    trigger: str
    parallel: bool
    also: tuple[str | Respelled, ...] = ()
    layout: str = "compact"
    listed: bool = False
    calls: str = ""
    """The call format's name when it is not the family's (`python-calls`: several Python calls)."""

    @property
    def triggers(self) -> tuple[str | Respelled, ...]:
        """Every text or token that opens a call, the one a required call forces first."""
        return (self.trigger, *self.also) if self.trigger else ()

    @property
    def openings(self) -> tuple[str, ...]:
        """The text of each trigger, as the model writes it."""
        return tuple(t.text if isinstance(t, Respelled) else t for t in self.triggers)

    @property
    def format(self) -> str:
        """The tooldec call format of this family in this layout (`hermes`, `hermes-lines`, `llama31`, ...)."""
        return format_in_layout(self.calls or self.family, self.layout)

    def laid_out(self, layout: str) -> ChatSyntax:
        """This syntax with guided calls in `layout` (LAYOUTS); raises ValueError for a layout the family lacks."""
        format_in_layout(self.calls or self.family, layout)
        return replace(self, layout=layout)


CHAT_SYNTAXES: dict[str, ChatSyntax] = {
    "hermes": ChatSyntax("hermes", "<tool_call>", parallel=True, also=(FENCE_OPEN, BARE_OPENING, *PRETTY_BARE_OPENINGS)),
    "llama31": ChatSyntax("llama31", BARE_OPENING, parallel=True, also=(LIST_OPENING, *PRETTY_BARE_OPENINGS)),
    "mistral": ChatSyntax("mistral", "[TOOL_CALLS]", parallel=True, listed=True),
    "python": ChatSyntax("python", "", parallel=True, listed=True, calls="python-calls"),
}
SYNTAXES: tuple[str, ...] = tuple(CHAT_SYNTAXES)
"""The names of the call syntaxes a request or an agent may name."""


def chat_syntax(family: str, layout: str = "compact") -> ChatSyntax:
    """The chat syntax of a model family (a key of CHAT_SYNTAXES) with its calls in `layout`; raises ValueError."""
    if family not in CHAT_SYNTAXES:
        raise ValueError(f"unknown call syntax {family!r}; known: {', '.join(CHAT_SYNTAXES)}")
    return CHAT_SYNTAXES[family].laid_out(layout)


def detect_syntax(tokenizer: Any) -> str:
    """The call syntax a model's chat template expects (Hermes when the template says nothing of tools)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):
        template = " ".join(template.values())
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "Environment: ipython" in template:
        return "llama31"
    return "hermes"
