"""Read the final answer out of a model's text: the number after "the answer is", else the last number."""

from __future__ import annotations

import re

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+"
_ANSWER_IS = re.compile(r"answer is:?\s*\$?\s*(" + _NUMBER + ")", re.IGNORECASE)
_ANY_NUMBER = re.compile(_NUMBER)


def extract_answer(text: str) -> str | None:
    """The answer stated in `text` as a string: after "the answer is", else its last number, else None."""
    m = _ANSWER_IS.search(text)
    if m:
        return m.group(1).replace(",", "")
    numbers = _ANY_NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def parse_number(text: str | None) -> float | None:
    """A float from an extracted answer, or None."""
    if text is None:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None
