"""Prompt compression (ToolDec paper §3.2): a model rewrites each tool's documentation into a short description.

With ToolDec the grammar enforces names, types and syntax, so the prompt only has to say what each tool is
for. The file holds one rewrite per documentation (`doc_key`: BFCL reuses a tool name with other documentation
across entries), each cached under the model and the sha256 of that documentation, so a second run only rewrites
tools that are new or changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tooldec.backends.loader import LoadedModel
from tooldec.decoding import FreeController
from tooldec.decoding.decoder import Decoder
from tooldec.errors import ToolDecError
from tooldec.grammar.calls import CallParseError, ParsedCall
from tooldec.specs import ToolSet, ToolSpec

COMPRESS_PROMPT = """\
Below is the documentation of one API tool, as JSON. Rewrite it as one short sentence that says what the \
tool does and what it needs, in plain words. Do not mention types, JSON, parameter syntax, defaults or \
examples. Answer with the sentence only.

Documentation:
{doc}"""
"""The rewriting prompt, sent as the user turn of the model's chat template (or as plain text without one)."""

_NEVER = re.compile(r"(?!x)x")
MAX_WORDS = 40


def _no_call(text: str) -> ParsedCall:
    """The rewrite holds no calls (the never-matching pattern never asks)."""
    raise CallParseError(f"not a call: {text!r}")


def tool_doc(spec: ToolSpec) -> str:
    """The full documentation of a tool as the model reads it (OpenAI function JSON)."""
    return json.dumps(spec.to_openai()["function"], ensure_ascii=False, sort_keys=True)


def doc_key(spec: ToolSpec) -> str:
    """sha256 of the tool's documentation: what a short description stands for (a name alone may not say)."""
    return hashlib.sha256(tool_doc(spec).encode()).hexdigest()


def cache_key(model: str, spec: ToolSpec) -> str:
    """sha256 of the model name, the prompt and the tool's documentation."""
    return hashlib.sha256(f"{model}\0{COMPRESS_PROMPT}\0{tool_doc(spec)}".encode()).hexdigest()


def clean_description(text: str) -> str:
    """The first line of the model's answer, unquoted and cut to MAX_WORDS words."""
    line = next((part.strip() for part in text.strip().splitlines() if part.strip()), "")
    line = line.strip("\"'` ")
    return " ".join(line.split()[:MAX_WORDS])


def compress_tools(
    lm: LoadedModel,
    specs: Sequence[ToolSpec],
    model: str,
    cached: dict[str, Any] | None = None,
    *,
    max_new_tokens: int = 48,
    batch_size: int = 8,
    progress: Callable[[str], None] | None = None,
    save: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The compressed-tools document: per documentation (`doc_key`; tools with the same documentation once) the
    tool's name, its cache key, short description and token counts before and after.

    Documentations not in `cached` (or cached under another key) are rewritten `batch_size` at a time, greedily;
    after each batch `save` gets the document so far (cached entries included), so an interrupted run resumes
    from it instead of starting over."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    old = (cached or {}).get("tools", {})
    unique: dict[str, ToolSpec] = {}
    for spec in specs:
        unique.setdefault(doc_key(spec), spec)
    keys = {doc: cache_key(model, spec) for doc, spec in unique.items()}
    done = {doc: old[doc] for doc in unique if old.get(doc, {}).get("key") == keys[doc]}
    todo = [(doc, spec) for doc, spec in unique.items() if doc not in done]
    in_order = lambda: {doc: done[doc] for doc in unique if doc in done}
    decoder = Decoder(lm.model, lm.vocab)
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        prompts = [_prompt_ids(lm, spec) for _, spec in batch]
        ctrls = [FreeController(lm.vocab, _NEVER, _no_call, max_calls=1, stop=("\n",)) for _ in batch]
        for (doc, spec), gen in zip(batch, decoder.generate(prompts, ctrls, max_new_tokens=max_new_tokens),
                                    strict=True):
            short = clean_description(gen.text) or spec.description
            done[doc] = {
                "name": spec.name,
                "key": keys[doc],
                "description": short,
                "tokens_before": len(lm.encode(tool_doc(spec))),
                "tokens_after": len(lm.encode(f"{spec.name}: {short}")),
            }
            if progress is not None:
                progress(spec.name)
        if save is not None:
            save(_document(model, in_order()))
    return _document(model, in_order())


def _prompt_ids(lm: LoadedModel, spec: ToolSpec) -> list[int]:
    """The rewriting prompt for `spec` as token ids: the chat template's user turn, or plain text without one."""
    prompt = COMPRESS_PROMPT.format(doc=tool_doc(spec))
    if getattr(lm.tokenizer, "chat_template", None):
        return lm.encode_chat([{"role": "user", "content": prompt}])
    return lm.encode(prompt + "\n\nShort description:")


def _document(model: str, tools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The compressed-tools document over `tools` (documentation key -> entry), with mean token counts."""
    before = sum(t["tokens_before"] for t in tools.values())
    after = sum(t["tokens_after"] for t in tools.values())
    n = max(len(tools), 1)
    return {
        "model": model,
        "prompt": COMPRESS_PROMPT,
        "tokens_per_tool_before": before / n,
        "tokens_per_tool_after": after / n,
        "tools": tools,
    }


def read_compressed(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A compressed-tools document ({} when the file does not exist yet)."""
    file = Path(path)
    if not file.exists():
        return {}
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ToolDecError(f"cannot read compressed tools {str(file)!r}: {err}") from err


def load_compressed(path: str | os.PathLike[str]) -> dict[str, str]:
    """Documentation key (`doc_key`) -> short description, from a compressed-tools file (written by any model)."""
    doc = read_compressed(path)
    if not doc:
        raise ToolDecError(f"no compressed tools in {os.fspath(path)!r}; run `tooldec compress-tools` first")
    return {key: entry["description"] for key, entry in doc.get("tools", {}).items()}


def short_description(short: Mapping[str, str], spec: ToolSpec) -> str:
    """The tool's short description in `short` (from load_compressed), or its own description if none was written."""
    return short.get(doc_key(spec), spec.description)


def write_compressed(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Write the document atomically."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, file)


def shortened(tools: Iterable[ToolSpec], short: Mapping[str, str]) -> ToolSet:
    """The tools with their short descriptions (`tooldec compress-tools`, keyed by documentation), parameters kept."""
    return ToolSet([ToolSpec(t.name, short_description(short, t), t.parameters) for t in tools])


def compressed_block(tools: ToolSet) -> str:
    """One line per tool, `name(param, ...): description`, without types or syntax (for shortened tools)."""
    lines = []
    for tool in tools:
        params = ", ".join(tool.parameters.get("properties", {}))
        lines.append(f"- {tool.name}({params}): {tool.description}")
    return "\n".join(lines)
