"""Metrics of the papers' experiments, independent of any model.

- FuncQA (ToolkenGPT): the number in the answer text is the first number after the last `####` or
  `answer is` (ToolkenGPT's two answer markers), else the last number of the text; thousands separators
  are dropped. It is correct when `|pred - gold| <= |gold| * 0.001` (ToolkenGPT's 0.1% tolerance,
  relative to the gold answer).
- KAMEL: correct when the chosen relation is the gold one.
- RestBench (RestGPT, "correct path rate"): correct when the gold solution path is a subsequence of the
  predicted sequence of calls (in order, other calls allowed in between). Steps compare as `METHOD /path`
  with surrounding spaces and trailing slashes dropped and every `{placeholder}` read as `{}`, so a gold step
  that misnames a path parameter still matches its operation.
- Syntax errors of a raw generated call, given the tool set: `format` when it does not parse in the call
  format, `name` when the tool does not exist, `argument` when the arguments fail the tool's JSON Schema
  (objects without `additionalProperties` closed to their properties and required keys, as the grammar
  generates them).
- The fuzzy baseline maps a name to the most similar existing tool name (difflib ratio, first on ties).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from tooldec.grammar.calls import CallFormat, CallParseError, ParsedCall, get_format
from tooldec.specs import ToolSet, ToolSpec
from tooldec.specs.normalize import closed_objects

FUNCQA_TOLERANCE = 1e-3
"""ToolkenGPT's relative tolerance for FuncQA answers (0.1%)."""

SYNTAX_ERROR_KINDS = ("format", "name", "argument")

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_MARKERS = ("####", "answer is")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def parse_number(text: str) -> float | None:
    """The answer number in model text: first number after the last answer marker, else the last number."""
    clean = _THOUSANDS.sub("", text)
    positions = [(clean.rfind(m), m) for m in _MARKERS]
    at, marker = max(positions)
    if at >= 0:
        found = _NUMBER.search(clean, at + len(marker))
        if found:
            return float(found.group())
    numbers = _NUMBER.findall(clean)
    return float(numbers[-1]) if numbers else None


def funcqa_correct(prediction: float | str | None, answer: float, rel_tol: float = FUNCQA_TOLERANCE) -> bool:
    """Whether a prediction (a number, or text to parse) is within `rel_tol` of the gold answer."""
    value = parse_number(prediction) if isinstance(prediction, str) else prediction
    if value is None:
        return False
    return abs(value - answer) <= abs(answer) * rel_tol


def kamel_correct(predicted_relation: str | None, gold_relation: str) -> bool:
    """Whether the chosen relation id is the gold one."""
    return predicted_relation == gold_relation


def accuracy(flags: Iterable[bool]) -> float:
    """Share of true flags (0.0 for none)."""
    values = list(flags)
    return sum(map(bool, values)) / len(values) if values else 0.0


def normalize_step(step: str) -> str:
    """`METHOD /path/{}`: upper-case method, single space, no trailing slash, placeholders anonymised."""
    method, _, path = step.strip().partition(" ")
    path = _PLACEHOLDER.sub("{}", path.strip())
    if len(path) > 1:
        path = path.rstrip("/")
    return f"{method.upper()} {path}"


def correct_path(predicted: Sequence[str], gold: Sequence[str]) -> bool:
    """RestGPT's correct path: the gold steps occur in the predicted steps in order (a subsequence)."""
    remaining = iter(normalize_step(s) for s in predicted)
    return all(step in remaining for step in (normalize_step(g) for g in gold))


def extra_calls(predicted: Sequence[str], gold: Sequence[str]) -> int:
    """RestGPT's Δ solution length of one query: predicted calls beyond the gold path's length."""
    return len(predicted) - len(gold)


@dataclass(frozen=True)
class SyntaxCheck:
    """The syntax verdict of one generated call: `kind` is None, 'format', 'name' or 'argument'."""

    kind: str | None
    message: str = ""
    call: ParsedCall | None = None


class SyntaxChecker:
    """Classifies generated calls of one tool set in one call format into format / name / argument errors."""

    def __init__(self, tools: Iterable[ToolSpec], fmt: str | CallFormat = "json") -> None:
        """Prepare a closed-object JSON Schema validator per tool."""
        self.tools = tools if isinstance(tools, ToolSet) else ToolSet(tools)
        self.format = get_format(fmt)
        self._validators = {
            spec.name: jsonschema.Draft202012Validator(
                closed_objects(spec.parameters), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
            for spec in self.tools
        }

    def classify(self, text: str) -> SyntaxCheck:
        """Parse `text` as one call and check it."""
        try:
            call = self.format.parse(text)
        except CallParseError as err:
            return SyntaxCheck("format", str(err))
        return self.check(call)

    def check(self, call: ParsedCall | tuple[str, dict[str, Any]]) -> SyntaxCheck:
        """Check an already parsed call: its tool name, then its arguments."""
        if not isinstance(call, ParsedCall):
            call = ParsedCall(call[0], call[1])
        if not isinstance(call.name, str) or call.name not in self._validators:
            return SyntaxCheck("name", f"no tool named {call.name!r}", call)
        if not isinstance(call.arguments, dict):
            return SyntaxCheck("argument", "arguments must be an object", call)
        try:
            arguments = call.bind(self.tools[call.name])
        except CallParseError as err:
            return SyntaxCheck("argument", str(err), call)
        error = jsonschema.exceptions.best_match(self._validators[call.name].iter_errors(arguments))
        if error is not None:
            where = "/".join(map(str, error.absolute_path))
            return SyntaxCheck("argument", f"{call.name}: {where or 'arguments'}: {error.message}", call)
        return SyntaxCheck(None, "", call)


def syntax_error_rates(kinds: Iterable[str | None]) -> dict[str, float]:
    """Share of each syntax-error kind, and of any error, among the given verdicts (one per item or call)."""
    values = list(kinds)
    total = len(values) or 1
    rates = {kind: sum(v == kind for v in values) / total for kind in SYNTAX_ERROR_KINDS}
    rates["any"] = sum(v is not None for v in values) / total
    return rates


def nearest_name(name: str, names: Sequence[str]) -> str:
    """`name` if it exists, else the most similar of `names` (difflib ratio; the earliest wins ties)."""
    if not names:
        raise ValueError("no tool names to match against")
    if name in names:
        return name
    matcher = difflib.SequenceMatcher(a=name)
    best, best_score = names[0], -1.0
    for candidate in names:
        matcher.set_seq2(candidate)
        score = matcher.ratio()
        if score > best_score:
            best, best_score = candidate, score
    return best


def fuzzy_call(call: ParsedCall, tools: Iterable[ToolSpec]) -> ParsedCall:
    """The fuzzy baseline: the same call with its tool name mapped to the nearest existing name."""
    names = [spec.name for spec in tools]
    return dataclasses.replace(call, name=nearest_name(call.name, names))


def tokens_per_tool(tool_text: str, n_tools: int, encode: Callable[[str], Sequence[int]]) -> float:
    """Prompt tokens spent on tool documentation, per tool (the papers' prompt-length measure)."""
    if n_tools <= 0:
        raise ValueError("n_tools must be positive")
    return len(encode(tool_text)) / n_tools
