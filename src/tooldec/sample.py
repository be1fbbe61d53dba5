"""Random walks through a guide: uniform choice among allowed tokens until EOS, for tests and the CLI."""

from __future__ import annotations

import random

from tooldec.guide import Guide
from tooldec.index.token_index import FINAL

DEFAULT_MAX_TOKENS = 4096


class WalkTooLong(RuntimeError):
    """A walk that did not reach EOS within its token budget."""


def random_walk(guide: Guide, rng: random.Random, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> Guide:
    """Advance `guide` by uniformly random allowed tokens until EOS is taken; returns the guide."""
    for _ in range(max_tokens):
        if guide.state == FINAL:
            return guide
        ids = guide.allowed_token_ids()
        if not len(ids):
            raise RuntimeError(f"dead end: no token allowed in state {guide.state}")
        guide.advance(int(ids[rng.randrange(len(ids))]))
    if guide.state == FINAL:
        return guide
    raise WalkTooLong(f"no EOS after {max_tokens} tokens")
