"""Where guidance overrode the model: per guided step, the probability mass the mask removed and the token the
model preferred, summed per answer (`Decoder.generate(explain=True)` records the steps)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tooldec.vocab import Vocabulary

MAX_OVERRIDES = 20
"""Overrides kept per answer (the sums count every step)."""


@dataclass(frozen=True)
class GuidedStep:
    """One sampled step whose mask banned tokens."""

    position: int
    """Index of the token among the generated ones."""
    removed: float
    """The model's probability mass on the banned tokens (softmax of its raw logits)."""
    preferred: int
    chosen: int
    overridden: bool
    """Whether the model's most likely token was banned."""


def guided_steps(raw: Iterable[Sequence[Any]], offset: int = 0) -> list[GuidedStep]:
    """Steps from a generation's `extra["guided_steps"]`, their positions shifted by `offset` tokens."""
    return [GuidedStep(int(p) + offset, float(r), int(a), int(b), bool(o)) for p, r, a, b, o in raw]


def _text(vocab: Vocabulary, token: int) -> str:
    data = vocab.token_bytes[token] if 0 <= token < len(vocab.token_bytes) else None
    return data.decode("utf-8", errors="replace") if data is not None else f"<{token}>"


def summarize(steps: Sequence[GuidedStep], vocab: Vocabulary) -> dict[str, Any]:
    """Per answer: guided steps, the sum and maximum of the mass removed, and the overrides (preferred vs taken)."""
    overrides = [s for s in steps if s.overridden]
    return {
        "guided_steps": len(steps),
        "removed_sum": round(sum(s.removed for s in steps), 6),
        "removed_max": round(max((s.removed for s in steps), default=0.0), 6),
        "overrides": len(overrides),
        "where": [
            {"at": s.position, "preferred": _text(vocab, s.preferred), "chosen": _text(vocab, s.chosen),
             "removed": round(s.removed, 4)}
            for s in sorted(overrides, key=lambda s: -s.removed)[:MAX_OVERRIDES]
        ],
    }


def describe(summary: dict[str, Any]) -> list[str]:
    """Lines for `tooldec run --explain`: each place guidance overrode the model, most mass removed first."""
    lines = [
        (f"guidance: {summary['guided_steps']} guided steps, probability mass removed {summary['removed_sum']:.3f} "
         f"in all (at most {summary['removed_max']:.3f} at one step), {summary['overrides']} overrides")
    ]
    for w in summary["where"]:
        lines.append(f"  token {w['at']}: the model preferred {w['preferred']!r}, guidance took {w['chosen']!r} "
                     f"(mass removed {w['removed']:.3f})")
    return lines
