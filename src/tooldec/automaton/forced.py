"""Forced stretches: from a DFA state, the bytes that are the only possible continuation.

Decoding appends them without asking the model ("jump forward"), which saves a forward pass per forced token;
it re-tokenises them canonically (the tokenizer's own split), never byte by byte. Each compiled grammar owns
one ForcedText, so its cache lives and dies with the grammar.
"""

from __future__ import annotations

import numpy as np

from tooldec.automaton.dfa import DEAD, DFA


class ForcedText:
    """The forced bytes after each state of one DFA, computed on first use and cached."""

    def __init__(self, dfa: DFA) -> None:
        """Group bytes by class once, so a state's single live byte is found from its transition row."""
        self.dfa = dfa
        classes = np.asarray(dfa.classes)
        self._class_bytes: dict[int, list[int]] = {}
        for byte, cls in enumerate(classes.tolist()):
            self._class_bytes.setdefault(cls, []).append(byte)
        self._cache: dict[int, bytes] = {}  # bounded by the number of states; racing writers store equal values

    def _single_byte(self, state: int) -> tuple[int, int] | None:
        """The only byte allowed in `state` and the state it leads to, or None."""
        if self.dfa.accepting[state]:
            return None
        row = np.asarray(self.dfa.trans[state])
        live = np.flatnonzero(row != DEAD)
        if len(live) != 1:
            return None
        members = self._class_bytes.get(int(live[0]), [])
        if len(members) != 1:
            return None
        return members[0], int(row[live[0]])

    def after(self, state: int) -> bytes:
        """The longest byte string that every valid continuation from `state` starts with."""
        got = self._cache.get(state)
        if got is not None:
            return got
        out = bytearray()
        s = state
        seen = {s}
        while (step := self._single_byte(s)) is not None:
            byte, s = step
            out.append(byte)
            if s in seen:
                break
            seen.add(s)
        result = bytes(out)
        self._cache[state] = result
        return result


def complete_utf8(data: bytes) -> bytes:
    """The longest prefix of `data` that ends on a UTF-8 character boundary."""
    for cut in range(len(data), max(-1, len(data) - 4), -1):
        try:
            data[:cut].decode()
            return data[:cut]
        except UnicodeDecodeError:
            continue
    return b""
