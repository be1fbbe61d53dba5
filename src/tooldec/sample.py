"""Random walks through a guide: uniform choice among allowed tokens until EOS, for tests and the CLI."""

from __future__ import annotations

import random

from tooldec.guide import Guide
from tooldec.index.token_index import FINAL

DEFAULT_MAX_TOKENS = 4096


class WalkTooLong(RuntimeError):
    """A walk that did not reach EOS within its token budget."""


def random_walk(guide: Guide, rng: random.Random, *, max_tokens: int = DEFAULT_MAX_TOKENS, eos_bias: float = 0.0) -> Guide:
    """Advance `guide` by uniformly random allowed tokens until EOS is taken; returns the guide.

    `eos_bias` is the probability of taking EOS whenever it is allowed (0 = uniform like any other token),
    which keeps walks over open-ended grammars short.
    """
    eos = guide.index.vocab.eos_ids
    for _ in range(max_tokens):
        if guide.state == FINAL:
            return guide
        ids = guide.allowed_token_ids()
        if not len(ids):
            raise RuntimeError(f"dead end: no token allowed in state {guide.state}")
        allowed_eos = [t for t in eos if guide.accepts(t)]
        if allowed_eos and rng.random() < eos_bias:
            guide.advance(allowed_eos[0])
            continue
        guide.advance(int(ids[rng.randrange(len(ids))]))
    if guide.state == FINAL:
        return guide
    raise WalkTooLong(f"no EOS after {max_tokens} tokens")
