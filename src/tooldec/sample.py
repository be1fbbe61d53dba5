"""Random walks through a guide: uniform choice among allowed tokens until EOS, for tests and the CLI.

A uniform walk is not sure to end: where the allowed tokens that continue a value outnumber those that close
it (digits, string characters, array items of nested arrays), it can run for thousands of tokens. With
`steer_after`, a walk that has not finished after that many tokens is steered home: from then on it only takes
tokens that bring it strictly closer (in bytes) to an accepting state, and EOS as soon as it is allowed.
"""

from __future__ import annotations

import random

import numpy as np

from tooldec.automaton.dfa import DEAD, DFA
from tooldec.cfg_guide import CfgGuide
from tooldec.guide import Guide
from tooldec.index.token_index import FINAL

DEFAULT_MAX_TOKENS = 4096

UNREACHABLE = np.iinfo(np.int64).max // 4
"""Distance of a state that cannot reach acceptance (the dead state); large, yet safe to add 1 to."""


class WalkTooLong(RuntimeError):
    """A walk that did not reach EOS within its token budget."""


def distances_to_accept(dfa: DFA) -> np.ndarray:
    """Fewest bytes from each DFA state to an accepting state, `int64[num_states]` (UNREACHABLE when none)."""
    dist = np.where(np.asarray(dfa.accepting, dtype=bool), 0, UNREACHABLE).astype(np.int64)
    dist[DEAD] = UNREACHABLE
    trans = np.asarray(dfa.trans, dtype=np.int64)
    while True:  # Bellman-Ford on unit edges: one more byte of reach per round, at most max-distance rounds
        nxt = np.minimum(dist, np.minimum(dist[trans].min(axis=1) + 1, UNREACHABLE))
        if np.array_equal(nxt, dist):
            return dist
        dist = nxt


def _homeward(ids: np.ndarray, nexts: np.ndarray, dist: np.ndarray, state: int) -> np.ndarray:
    """The allowed tokens a steered walk may take: EOS when allowed, else those that get strictly closer to
    acceptance, else (no single token does) those that get as close as any."""
    final = nexts == FINAL
    if final.any():
        return ids[final]
    d = dist[nexts]
    closer = ids[d < dist[state]]
    return closer if len(closer) else ids[d == d.min()]


def random_walk(
    guide: Guide | CfgGuide, rng: random.Random, *, max_tokens: int = DEFAULT_MAX_TOKENS,
    steer_after: int | None = None,
) -> Guide | CfgGuide:
    """Advance `guide` by uniformly random allowed tokens until EOS is taken; returns the guide.

    After `steer_after` tokens (None: never), choose uniformly among the tokens that lead home instead (see the
    module docstring). Raises WalkTooLong when EOS is not taken within `max_tokens` tokens.
    """
    if isinstance(guide, CfgGuide):
        return _grammar_walk(guide, rng, max_tokens=max_tokens, steer_after=steer_after)
    dist: np.ndarray | None = None
    for step in range(max_tokens):
        if guide.state == FINAL:
            return guide
        if steer_after is not None and step >= steer_after:
            if dist is None:
                dist = distances_to_accept(guide.index.dfa)
            ids, nexts = guide.index.transitions(guide.state)
            if len(ids):
                ids = _homeward(ids, nexts, dist, guide.state)
        else:
            ids = guide.allowed_token_ids()
        if not len(ids):
            raise RuntimeError(f"dead end: no token allowed in state {guide.state}")
        guide.advance(int(ids[rng.randrange(len(ids))]))
    if guide.state == FINAL:
        return guide
    raise WalkTooLong(f"no EOS after {max_tokens} tokens")


def _grammar_walk(guide: CfgGuide, rng: random.Random, *, max_tokens: int, steer_after: int | None) -> CfgGuide:
    """`random_walk` over a context-free guide: home is measured by the guide's fewest bytes to a complete
    sentence (the core's `steer` keeps the allowed tokens after which it is smallest, EOS first)."""
    eos = guide.vocab.eos_ids
    for step in range(max_tokens):
        ids = guide.allowed_token_ids()
        if not len(ids):
            raise RuntimeError(f"dead end: no token allowed after {guide.num_tokens} tokens")
        if steer_after is not None and step >= steer_after:
            ids = guide.matcher.steer(ids.astype(np.int32))
        token = int(ids[rng.randrange(len(ids))])
        guide.advance(token)
        if token in eos:
            return guide
    raise WalkTooLong(f"no EOS after {max_tokens} tokens")
