"""Inline calls in generated text (ToolkenGPT, ReAct): the controller that guides them, or only reads them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController
from tooldec.grammar.calls import CallFormat, with_aliases
from tooldec.specs import ToolSet


def inline_controller(
    compiler: Compiler,
    tools: ToolSet,
    fmt: CallFormat,
    *,
    guided: bool,
    trigger: str | Sequence[str],
    call_end: re.Pattern[str],
    max_calls: int,
    stop: tuple[str, ...],
    end_in_text: bool = True,
) -> CallController | FreeController:
    """Guided: text until a trigger, then a call of `tools` in `fmt` (a tool may be named by a unique suffix of
    its name, see `with_aliases`), with EOS allowed in the text only if `end_in_text`; unguided: free text whose
    calls are found by `call_end` and parsed best-effort. Both return to text after a call, up to `max_calls`."""
    if guided:
        grammar = compiler.compile(tools, with_aliases(fmt, tools))
        return CallController(grammar, trigger=trigger, after_call="text", max_calls=max_calls, stop=stop,
                              end_in_text=end_in_text)
    return FreeController(compiler.vocab, call_end, fmt.parse, max_calls=max_calls, stop=stop)
