"""The token index: for each automaton state, the tokens allowed there and where each leads.

A state's entry is computed on first visit and then cached. The vocabulary is prepared once: its tokens sorted
by their bytes, so that the tokens sharing a prefix form one contiguous range (an implicit token trie). A state's
tokens come from walking that trie through the DFA: a dead byte prunes its whole range (the sub-range of a live
byte is found by binary search), a small range is walked token by token, and a range under a wide state is
walked with numpy, all its tokens at once. Inside a literal (a tool name, fixed text) this touches only the
tokens that are prefixes of the forced text.

States inside a free region (a string's content, a pattern) are shared: the region is the set of wide states
reachable from the state, up to the narrow states where it exits, and its byte-level structure is a signature.
The tokens that stay inside the region are found once per signature and vocabulary (a per-vocabulary cache, part
of the tokenizer's preparation) and only the few tokens that leave it are walked again per state.
EOS ids are allowed exactly in accepting states and lead to FINAL.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import repeat

import numpy as np

from tooldec.automaton.dfa import DEAD, DFA
from tooldec.vocab import Vocabulary

FINAL = -1
SMALL_RANGE = 4
"""Ranges of at most this many tokens are walked one token at a time in Python."""
NARROW = 4
"""A state with at most this many live bytes is narrow: its trie walk branches per byte."""
PY_ROWS = 128
"""A sub-range of at most this many tokens under a wide state is walked one token at a time."""
SPARSE_TOKENS = 64
"""Masks of at most this many tokens are written word by word instead of kept packed."""
REGION_MIN_TOKENS = 4096
"""A wide state whose first-byte range holds more tokens than this is looked up as a shared region."""
MAX_REGION_STATES = 4096
"""Larger regions are not shared; their states are walked with numpy directly."""
REGION_CACHE_SIZE = 32
"""Region results kept per vocabulary."""
CHAIN_MAX = 64
"""A literal stretch is indexed at most this many states ahead at once."""
WARM_WIDTH = 64
"""The branch after the start's literal stretch is indexed at compile time if at most this many bytes go on."""
CHAIN_MIN = 12
"""Shorter literal stretches are left to the per-state trie walk (the one-pass cost would not pay off)."""
CHAIN_RANGE = 512
"""A state of a literal stretch with more candidate tokens than this is walked on its own instead."""

_HIGH = np.array([((1 << 64) - 1) ^ ((1 << (64 - 8 * q)) - 1) for q in range(9)], dtype=np.uint64)
"""_HIGH[q]: the mask of the first q bytes of a big-endian 8-byte key."""
_WINDOWS = np.arange(CHAIN_MAX)[:, None] + np.arange(8)
_ARANGE = np.arange(CHAIN_MAX + 1)


@lru_cache(maxsize=CHAIN_MAX)
def _queries(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Key-range queries of a literal stretch of m states: (offset j, first-bytes mask, open low bytes, bytes left).

    Offset j asks for the tokens equal to each of its next 1..min(left, 8) forced bytes; the last of these is
    open (any token starting with them) where the stretch ends within 8 bytes.
    """
    rest = m - np.arange(m)
    reach = np.minimum(rest, 8)
    qj, ql = np.nonzero(np.arange(1, 9)[None, :] <= reach[:, None])
    ql += 1
    high = _HIGH[ql]
    open_low = np.where((ql == reach[qj]) & (ql < 8), ~high, np.uint64(0))
    return qj, high, open_low, rest

_BYTE = [bytes([b]) for b in range(256)]


@dataclass(frozen=True)
class _Region:
    """The tokens of one region signature: those that stay inside, and those that exit, per exit."""

    stay_ids: np.ndarray  # int64 token ids ending inside the region
    stay_end: np.ndarray  # int64 local state each of them ends in
    packed: np.ndarray  # uint32 bitmask of stay_ids
    exits: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # per exit: lex rows, byte offset after it, next byte


@dataclass
class _VocabTrie:
    """A vocabulary sorted by token bytes, flattened for numpy, with its region cache (built once per vocabulary)."""

    tokens: list[bytes]  # token bytes in lexicographic order (empty and None tokens left out)
    ids: np.ndarray  # int64 token id of each
    ids_list: list[int]  # the same as a list
    lens: np.ndarray  # int64 length of each
    offsets: np.ndarray  # int64 start of each in flat
    flat: np.ndarray  # uint8 bytes of all of them, in that order
    first: list[int]  # first[b]..first[b + 1]: the tokens starting with byte b
    second: list[int]  # second[257 * a + b + 1]..second[257 * a + b + 2]: those starting with bytes a, b
    words: int  # packed mask length
    key8: np.ndarray  # uint64 first 8 bytes of each, big-endian, zero-padded (non-decreasing)
    regions: OrderedDict[bytes, _Region] = field(default_factory=OrderedDict)

    def sub(self, lo: int, hi: int, depth: int, b0: int, b1: int) -> tuple[int, int]:
        """The sub-range of [lo, hi) (tokens sharing `depth` bytes) whose next byte is in b0..b1."""
        if depth == 0:
            return self.first[b0], self.first[b1 + 1]
        tokens = self.tokens
        if depth == 1:
            base = 257 * tokens[lo][0]
            return self.second[base + b0 + 1], self.second[base + b1 + 2]
        prefix = tokens[lo][:depth]
        sub_lo = bisect_left(tokens, prefix + _BYTE[b0], lo, hi)
        return sub_lo, bisect_left(tokens, prefix + _BYTE[b1 + 1], sub_lo, hi) if b1 < 255 else hi


_TRIES: weakref.WeakKeyDictionary[Vocabulary, _VocabTrie] = weakref.WeakKeyDictionary()


def vocab_trie(vocab: Vocabulary) -> _VocabTrie:
    """The sorted token arrays of a vocabulary, cached for the vocabulary's lifetime (tokenizer preparation)."""
    got = _TRIES.get(vocab)
    if got is not None:
        return got
    tb = vocab.token_bytes
    order = sorted((i for i, b in enumerate(tb) if b), key=tb.__getitem__)
    tokens: list[bytes] = [bytes(bytearray(tb[i])) for i in order]  # type: ignore[arg-type]  # fresh, in order
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    offsets = np.zeros(len(tokens), dtype=np.int64)
    if len(tokens) > 1:
        offsets[1:] = np.cumsum(lens)[:-1]
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    heads = np.frombuffer(bytes(t[0] for t in tokens), dtype=np.uint8)
    first = np.searchsorted(heads, np.arange(257), side="left").tolist()
    seconds = np.frombuffer(bytes(t[1] if len(t) > 1 else 0 for t in tokens), dtype=np.uint8)
    keys = heads.astype(np.int64) * 257 + np.where(lens > 1, seconds.astype(np.int64) + 1, 0)
    second = np.searchsorted(keys, np.arange(257 * 257 + 1), side="left").tolist()
    cols = offsets[:, None] + np.arange(8)
    head8 = np.where(cols < (offsets + lens)[:, None], flat[np.minimum(cols, max(flat.size - 1, 0))], 0)
    trie = _VocabTrie(
        tokens=tokens,
        ids=np.array(order, dtype=np.int64),
        ids_list=order,
        lens=lens,
        offsets=offsets,
        flat=flat,
        first=first,
        second=second,
        words=(vocab.size + 31) // 32,
        key8=np.ascontiguousarray(head8, dtype=np.uint8).view(">u8").ravel().astype(np.uint64),
    )
    _TRIES[vocab] = trie
    return trie


def _pack(ids: list[int], arrays: list[np.ndarray], words: int, base: np.ndarray | None) -> np.ndarray:
    """Token ids (a list and arrays) as a uint32 bitmask of `words` words, or'ed into a copy of `base` if given."""
    out = np.zeros(words, dtype=np.uint32) if base is None else base.copy()
    if ids:
        acc: dict[int, int] = {}
        for t in ids:
            acc[t >> 5] = acc.get(t >> 5, 0) | (1 << (t & 31))
        if base is not None:
            for w, bits in acc.items():
                acc[w] = bits | int(out[w])
        out[list(acc)] = list(acc.values())
    for arr in arrays:
        np.bitwise_or.at(out, arr >> 5, (1 << (arr & 31)).astype(np.uint32))
    return out


@dataclass
class _Entry:
    """One state's tokens: those found by the walk (lex rows, next states), plus a shared region's stay set."""

    rows: list[int] = field(default_factory=list)  # lex rows of the tokens found one by one
    nexts: list[int] = field(default_factory=list)  # the state each of them leads to
    np_rows: list[np.ndarray] = field(default_factory=list)  # lex rows found by numpy walks
    np_nexts: list[np.ndarray] = field(default_factory=list)
    region: _Region | None = None
    local: np.ndarray | None = None  # concrete state of each region-local state


class TokenIndex:
    """State → (allowed token ids, next states), computed per state on first use and then cached."""

    def __init__(self, dfa: DFA, vocab: Vocabulary) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self._trie = vocab_trie(vocab)
        self._trans2d = np.ascontiguousarray(dfa.trans, dtype=np.int32)
        self._trans = self._trans2d.reshape(-1)
        self._t = memoryview(self._trans)  # flat transitions: state * n_classes + class → state
        self._nc = int(dfa.trans.shape[1])
        self._classes = dfa.classes.astype(np.int64)
        self._cls = bytes(dfa.classes.astype(np.uint8))
        self._class_bytes: list[list[int]] = [[] for _ in range(self._nc)]
        for b, c in enumerate(dfa.classes.tolist()):
            self._class_bytes[c].append(b)
        self._class_size = np.array([len(bs) for bs in self._class_bytes], dtype=np.int64)
        self._eos = np.array(sorted(vocab.eos_ids), dtype=np.int64)
        self._eos_set = vocab.eos_ids
        self._eos_list = self._eos.tolist()
        self._live: dict[int, list[int]] = {}
        self._entries: dict[int, _Entry] = {}
        self._bitmasks: dict[int, np.ndarray] = {}
        self._transitions: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._sparse: dict[int, list[tuple[int, int]]] = {}
        self._chained: dict[int, tuple[tuple[np.ndarray, np.ndarray], int, int]] = {}  # (stretch arrays, lo, hi)
        self._unchained: set[int] = set()
        self.words = self._trie.words
        live = self._trans2d != DEAD
        first_class = live.argmax(1)
        first_byte = np.array([bs[0] if bs else -1 for bs in self._class_bytes], dtype=np.int64)
        one = (live.sum(1) == 1) & (self._class_size[first_class] == 1)
        self._single: list[int] = np.where(one, first_byte[first_class], -1).tolist()  # the only live byte, or -1

    @property
    def start(self) -> int:
        """The start state."""
        return self.dfa.start

    def is_accepting(self, state: int) -> bool:
        """Whether the text so far is a complete call (EOS allowed)."""
        return state != FINAL and bool(self.dfa.accepting[state])

    def _entry(self, state: int) -> _Entry:
        got = self._entries.get(state)
        if got is None:
            chained = self._chained.get(state)
            if chained is None and state > DEAD and self._single[state] >= 0 and state not in self._unchained:
                self._chain(state)
                chained = self._chained.get(state)
            if chained is not None:
                (rows, nexts), lo, hi = chained
                got = _Entry(np_rows=[rows[lo:hi]], np_nexts=[nexts[lo:hi]])
            else:
                got = self._compute(state)
            self._entries[state] = got
        return got

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted allowed token ids in `state` (EOS included when accepting) and the state each leads to (cached)."""
        got = self._transitions.get(state)
        if got is not None:
            return got
        e = self._entry(state)
        trie = self._trie
        ids = [trie.ids[np.array(e.rows, dtype=np.int64)], *(trie.ids[r] for r in e.np_rows)]
        nxt = [np.array(e.nexts, dtype=np.int64), *e.np_nexts]
        if e.region is not None and e.local is not None:
            ids.append(e.region.stay_ids)
            nxt.append(e.local[e.region.stay_end])
        if self.is_accepting(state) and self._eos.size:
            ids.append(self._eos)
            nxt.append(np.full(self._eos.size, FINAL, dtype=np.int64))
        all_ids = np.concatenate(ids)
        perm = np.argsort(all_ids, kind="stable")
        got = (all_ids[perm], np.concatenate(nxt).astype(np.int32)[perm])
        for arr in got:
            arr.flags.writeable = False
        self._transitions[state] = got
        return got

    def allowed_ids(self, state: int) -> np.ndarray:
        """Sorted token ids allowed in `state`."""
        return self.transitions(state)[0]

    def bitmask(self, state: int) -> np.ndarray:
        """Allowed tokens as `int32[ceil(V/32)]`: token t is bit `t & 31` of word `t >> 5` (read-only)."""
        got = self._bitmasks.get(state)
        if got is None:
            e = self._entry(state)
            ids_list = self._trie.ids_list
            ids = [ids_list[r] for r in e.rows]
            if self.is_accepting(state):
                ids.extend(self._eos_list)
            arrays = [self._trie.ids[r] for r in e.np_rows]
            base = e.region.packed if e.region is not None else None
            got = _pack(ids, arrays, self.words, base).view("<i4")
            got.flags.writeable = False
            self._bitmasks[state] = got
        return got

    def fill_bitmask(self, state: int, out: np.ndarray) -> None:
        """Write the packed mask of `state` into the int32 row `out` (sparse masks set only their words)."""
        sparse = self._sparse.get(state)
        if sparse is None:
            got = self._bitmasks.get(state)
            if got is None:
                e = self._entry(state)
                sparse = self._sparse.get(state)  # a literal stretch writes its states' sparse masks
                if sparse is not None:
                    pass
                elif e.region is None and not e.np_rows and len(e.rows) <= SPARSE_TOKENS:
                    ids_list = self._trie.ids_list
                    ids = [ids_list[r] for r in e.rows]
                    if self.is_accepting(state):
                        ids.extend(self._eos_list)
                    acc: dict[int, int] = {}
                    for t in ids:
                        acc[t >> 5] = acc.get(t >> 5, 0) | (1 << (t & 31))
                    sparse = self._sparse[state] = [(w, v - (1 << 32) if v >> 31 else v) for w, v in acc.items()]
                else:
                    got = self.bitmask(state)
            if got is not None:
                out[:] = got
                return
        out.fill(0)
        for w, v in sparse:
            out[w] = v

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id` (FINAL after EOS, DEAD if not allowed); walks the token's bytes only."""
        if state <= DEAD:  # DEAD or FINAL
            return DEAD
        if token_id in self._eos_set:
            return FINAL if self.dfa.accepting[state] else DEAD
        tb = self.vocab.token_bytes
        data = tb[token_id] if 0 <= token_id < len(tb) else None
        if not data:
            return DEAD
        t, nc, cls = self._t, self._nc, self._cls
        for b in data:
            state = t[state * nc + cls[b]]
            if not state:
                return DEAD
        return state

    def warm(self) -> None:
        """Index the start state, its literal stretch and, if narrow, the state where it branches (at compile time).

        In a tool set that branch is the first byte of the tool name; a wide one (a value) is left to its visit.
        """
        state = self.start
        if state <= DEAD:
            return
        row = np.zeros(self.words, dtype=np.int32)
        self.fill_bitmask(state, row)
        t, nc, cls, single = self._t, self._nc, self._cls, self._single
        for _ in range(CHAIN_MAX):
            b = single[state]
            if b < 0:
                break
            state = t[state * nc + cls[b]]
        if state > DEAD and self._width(state) <= WARM_WIDTH:
            self.fill_bitmask(state, row)

    def _chain(self, state: int) -> None:
        """Index the literal stretch from `state` (states with one live byte each) in one vectorised pass.

        A token is allowed at offset j of the stretch iff its bytes agree with the forced text as far as both go
        (checked on 8-byte keys) and, if it runs past the checked bytes, its rest walks on from there. The
        candidates are found by binary search on the vocabulary's 8-byte keys: the tokens that are prefixes of
        the forced text, and those that start with the whole rest of it (or with its next 8 bytes). States with
        more than CHAIN_RANGE candidates are left to the trie walk.
        """
        single, t, nc, cls = self._single, self._t, self._nc, self._cls
        states: list[int] = []
        data = bytearray()
        s = state
        while len(states) < CHAIN_MAX:
            b = single[s]
            if b < 0:
                break
            states.append(s)
            data.append(b)
            s = t[s * nc + cls[b]]
        m = len(states)
        if m < CHAIN_MIN:
            self._unchained.add(state)
            return
        trie = self._trie
        path = np.array([*states, s], dtype=np.int64)  # path[j]: the state after j forced bytes
        pad = np.zeros(m + 8, dtype=np.uint8)
        pad[:m] = np.frombuffer(bytes(data), dtype=np.uint8)
        key = np.ascontiguousarray(pad[_WINDOWS[:m]]).view(">u8").ravel().astype(np.uint64)  # next 8 bytes
        qj, high_q, open_q, rest = _queries(m)
        lo_key = key[qj] & high_q
        bounds = np.searchsorted(trie.key8, np.concatenate([lo_key, (lo_key | open_q) + np.uint64(1)]))
        lo = bounds[: qj.size]
        size = bounds[qj.size :] - lo
        ok = np.bincount(qj, weights=size, minlength=m) <= CHAIN_RANGE
        sel = ok[qj] & (size > 0)
        qj, lo, size = qj[sel], lo[sel], size[sel]
        pj = np.repeat(qj, size)
        rows = np.arange(pj.size) + np.repeat(lo - (np.cumsum(size) - size), size)
        if 0 in data:  # a forced NUL byte can make the key ranges overlap
            flat_key = np.unique(pj * len(trie.tokens) + rows)
            pj, rows = flat_key // len(trie.tokens), flat_key % len(trie.tokens)
        lens = trie.lens[rows]
        q = np.minimum(np.minimum(lens, rest[pj]), 8)
        high = _HIGH[q]
        agree = (trie.key8[rows] & high) == (key[pj] & high)
        pj, rows, lens, q = pj[agree], rows[agree], lens[agree], q[agree]
        whole = lens == q
        got_j, got_rows, got_next = [pj[whole]], [rows[whole]], [path[pj[whole] + q[whole]]]
        part = ~whole
        self._walk_pairs(pj[part], rows[part], path[pj[part] + q[part]], q[part], got_j, got_rows, got_next)
        all_j = np.concatenate(got_j)
        order = np.argsort(all_j, kind="stable")
        all_j, all_rows, all_next = all_j[order], np.concatenate(got_rows)[order], np.concatenate(got_next)[order]
        # sparse masks: (state offset, word) → bits, EOS included where accepting
        ids = trie.ids[all_rows]
        cell_j = all_j
        acc = np.flatnonzero(self.dfa.accepting[path[:m]] & ok)
        if acc.size and self._eos.size:
            cell_j = np.concatenate([all_j, np.repeat(acc, self._eos.size)])
            ids = np.concatenate([ids, np.tile(self._eos, acc.size)])
        cell = cell_j * self.words + (ids >> 5)
        order = np.argsort(cell, kind="stable")
        cell, bits = cell[order], np.left_shift(1, ids[order] & 31)
        first = np.flatnonzero(np.concatenate([[True], cell[1:] != cell[:-1]])) if cell.size else order
        bits = np.bitwise_or.reduceat(bits, first) if cell.size else bits
        cell = cell[first]
        bits = np.where(bits >> 31, bits - (1 << 32), bits)
        cut = np.searchsorted(all_j, _ARANGE[: m + 1]).tolist()
        wcut = np.searchsorted(cell // self.words, _ARANGE[: m + 1]).tolist()
        pairs = list(zip((cell % self.words).tolist(), bits.tolist(), strict=True))
        good = ok.tolist()
        chain = (all_rows, all_next)
        self._chained.update((s, (chain, cut[j], cut[j + 1])) for j, s in enumerate(states) if good[j])
        self._sparse.update(
            (s, pairs[wcut[j] : wcut[j + 1]])
            for j, s in enumerate(states)
            if good[j] and wcut[j + 1] - wcut[j] <= SPARSE_TOKENS
        )
        if not all(good):
            self._unchained.update(s for j, s in enumerate(states) if not good[j])

    def _walk_pairs(
        self,
        origin: np.ndarray,
        rows: np.ndarray,
        cur: np.ndarray,
        pos: np.ndarray,
        got_origin: list[np.ndarray],
        got_rows: list[np.ndarray],
        got_next: list[np.ndarray],
    ) -> None:
        """Walk each lex row on from byte `pos` in state `cur` at once; collect (origin, row, end state) of those allowed."""
        trie, trans, nc, classes = self._trie, self._trans, self._nc, self._classes
        while rows.size:
            cur = trans[cur * nc + classes[trie.flat[trie.offsets[rows] + pos]]].astype(np.int64)
            pos = pos + 1
            keep = (cur != DEAD) & (pos < trie.lens[rows])
            done = (cur != DEAD) & ~keep
            if done.any():
                got_origin.append(origin[done])
                got_rows.append(rows[done])
                got_next.append(cur[done])
            origin, rows, cur, pos = origin[keep], rows[keep], cur[keep], pos[keep]

    def _live_bytes(self, state: int) -> list[int]:
        """The bytes with a live transition out of `state`, ascending (cached)."""
        got = self._live.get(state)
        if got is None:
            live = self._trans2d[state].nonzero()[0].tolist()
            if len(live) == 1:
                got = self._class_bytes[live[0]]
            else:
                got = sorted(b for c in live for b in self._class_bytes[c])
            self._live[state] = got
        return got

    def _width(self, state: int) -> int:
        """How many bytes have a live transition out of `state`."""
        got = self._live.get(state)
        if got is not None:
            return len(got)
        return int(self._class_size[self._trans2d[state].nonzero()[0]].sum())

    def _ranges(self, lo: int, hi: int, depth: int, live: list[int]) -> list[tuple[int, int, int, int]]:
        """Per run b0..b1 of consecutive live bytes, the sub-range of [lo, hi) (sharing `depth` bytes) it starts."""
        out: list[tuple[int, int, int, int]] = []
        i = 0
        while i < len(live):
            j = i
            while j + 1 < len(live) and live[j + 1] == live[j] + 1:
                j += 1
            b0, b1 = live[i], live[j]
            sub_lo, sub_hi = self._trie.sub(lo, hi, depth, b0, b1)
            if sub_lo < sub_hi:
                out.append((b0, b1, sub_lo, sub_hi))
            i = j + 1
        return out

    def _compute(self, state: int) -> _Entry:
        """Walk the token trie from `state` (or look its region up) and return its entry."""
        out = _Entry()
        if state <= DEAD:
            return out
        live = self._live_bytes(state)
        if len(live) > NARROW and not self._trie_like(state, live):
            ranges = self._ranges(0, len(self._trie.tokens), 0, live)
            if sum(hi - lo for _, _, lo, hi in ranges) > REGION_MIN_TOKENS:
                entry = self._region_entry(state)
                if entry is not None:
                    return entry
        self._walk(state, 0, len(self._trie.tokens), 0, out)
        return out

    def _walk(self, state: int, lo: int, hi: int, depth: int, out: _Entry) -> None:
        """Collect the tokens of lex range [lo, hi) (all sharing `depth` bytes read into `state`) allowed there."""
        tokens = self._trie.tokens
        t, nc, cls = self._t, self._nc, self._cls
        live = self._live.get(state) or self._live_bytes(state)
        while len(live) == 1:  # inside a literal: follow it while the range stays large
            while lo < hi and len(tokens[lo]) == depth:
                out.rows.append(lo)
                out.nexts.append(state)
                lo += 1
            if hi - lo <= SMALL_RANGE:
                break
            b = live[0]
            lo, hi = self._trie.sub(lo, hi, depth, b, b)
            state = t[state * nc + cls[b]]
            depth += 1
            live = self._live.get(state) or self._live_bytes(state)
        while lo < hi and len(tokens[lo]) == depth:
            out.rows.append(lo)
            out.nexts.append(state)
            lo += 1
        if hi - lo <= SMALL_RANGE:
            self._walk_python(state, zip(range(lo, hi), repeat(depth)), out)
            return
        batch = []
        for b0, b1, sub_lo, sub_hi in self._ranges(lo, hi, depth, live):
            if sub_hi - sub_lo <= PY_ROWS:
                self._walk_python(state, zip(range(sub_lo, sub_hi), repeat(depth)), out)
            elif b0 == b1:
                self._walk(t[state * nc + cls[b0]], sub_lo, sub_hi, depth + 1, out)
            elif self._trie_like(state, range(b0, b1 + 1)):
                for b, bl, bh in self._split(sub_lo, sub_hi, depth, b0, b1):
                    self._walk(t[state * nc + cls[b]], bl, bh, depth + 1, out)
            else:
                batch.append(np.arange(sub_lo, sub_hi))
        if batch:
            self._walk_numpy(state, np.concatenate(batch), depth, out)

    def _walk_python(self, state: int, starts: Iterable[tuple[int, int]], out: _Entry) -> None:
        """Walk tokens one by one from `state`: each (lex row, byte offset) pair from that byte on."""
        tokens = self._trie.tokens
        t, nc, cls = self._t, self._nc, self._cls
        for i, depth in starts:
            s = state
            for b in tokens[i][depth:]:
                s = t[s * nc + cls[b]]
                if not s:
                    break
            else:
                out.rows.append(i)
                out.nexts.append(s)

    def _split(self, lo: int, hi: int, depth: int, b0: int, b1: int) -> list[tuple[int, int, int]]:
        """The non-empty sub-ranges of [lo, hi) per next byte b0..b1: (byte, lo, hi)."""
        out = []
        for b in range(b0, b1 + 1):
            sub_lo, sub_hi = self._trie.sub(lo, hi, depth, b, b)
            if sub_lo < sub_hi:
                out.append((b, sub_lo, sub_hi))
        return out

    def _trie_like(self, state: int, live: Iterable[int]) -> bool:
        """Whether the `live` bytes lead from `state` to states at most half as wide (or narrow): branch per byte."""
        t, nc, cls = self._t, self._nc, self._cls
        limit = max(NARROW, self._width(state) // 2)
        targets = {t[state * nc + cls[b]] for b in live}
        return all(self._width(s) <= limit for s in targets)

    def _walk_numpy(self, state: int, rows: np.ndarray, depth: int, out: _Entry) -> None:
        """Walk lex `rows` (all longer than `depth`, their first `depth` bytes read into `state`) at once."""
        trie, trans, nc, classes = self._trie, self._trans, self._nc, self._classes
        cur = np.full(rows.size, state, dtype=np.int64)
        j = depth
        while rows.size:
            cur = trans[cur * nc + classes[trie.flat[trie.offsets[rows] + j]]].astype(np.int64)
            keep = cur != DEAD
            if not keep.all():
                rows, cur = rows[keep], cur[keep]
            j += 1
            done = trie.lens[rows] == j
            if done.any():
                out.np_rows.append(rows[done])
                out.np_nexts.append(cur[done])
                rows, cur = rows[~done], cur[~done]

    def _region_entry(self, state: int) -> _Entry | None:
        """The entry of a wide state through its region's shared result, or None if the region is too large."""
        found = self._region_signature(state)
        if found is None:
            return None
        key, local, exits = found
        cache = self._trie.regions
        region = cache.get(key)
        if region is None:
            region = self._region_tokens(key, len(local), len(exits))
            cache[key] = region
            while len(cache) > REGION_CACHE_SIZE:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        out = _Entry(region=region, local=np.array(local, dtype=np.int64))
        for exit_state, (rows, pos, nxt_byte) in zip(exits, region.exits, strict=True):
            ok = np.zeros(257, dtype=bool)
            ok[self._live_bytes(exit_state)] = True
            ok[256] = True
            sel = np.flatnonzero(ok[nxt_byte])
            self._walk_python(exit_state, zip(rows[sel].tolist(), pos[sel].tolist(), strict=True), out)
        return out

    def _region_signature(self, state: int) -> tuple[bytes, list[int], list[int]] | None:
        """Breadth-first over the wide states from `state`: (byte-level signature, local states, exit states).

        None when the region is too large.
        """
        pos = {state: 0}
        exit_no: dict[int, int] = {}
        local = [state]
        exits: list[int] = []
        frontier = [state]
        blocks = []
        trans2d = self._trans2d
        while frontier:
            block = trans2d[frontier]
            blocks.append(block[:, self._classes])
            values, first = np.unique(block, return_index=True)
            seen = values[np.argsort(first)].tolist()
            fresh = [s for s in seen if s != DEAD and s not in pos and s not in exit_no]
            if not fresh:
                break
            widths = (trans2d[fresh] != DEAD).astype(np.int64) @ self._class_size
            frontier = []
            for s, width in zip(fresh, widths.tolist(), strict=True):
                if width > NARROW:
                    pos[s] = len(local)
                    local.append(s)
                    frontier.append(s)
                else:
                    exit_no[s] = len(exits)
                    exits.append(s)
            if len(local) > MAX_REGION_STATES:
                return None
        keys = np.array([DEAD, *local, *exits], dtype=np.int64)
        codes = np.array([0, *range(1, len(local) + 1), *range(-1, -len(exits) - 1, -1)], dtype=np.int16)
        perm = np.argsort(keys)
        rows = np.concatenate(blocks)
        relabeled = codes[perm][np.searchsorted(keys[perm], rows)]
        return relabeled.tobytes(), local, exits

    def _region_tokens(self, key: bytes, n_local: int, n_exits: int) -> _Region:
        """Walk the whole vocabulary through a region's local automaton (codes: >0 local, <0 exit, 0 dead)."""
        trie = self._trie
        table = np.zeros((n_local + 1, 256), dtype=np.int64)
        table[1:] = np.frombuffer(key, dtype=np.int16).reshape(n_local, 256)
        first = trie.first
        starts = np.flatnonzero(table[1]).tolist()
        rows = np.concatenate([np.arange(first[b], first[b + 1], dtype=np.int64) for b in starts])
        cur = np.ones(rows.size, dtype=np.int64)
        stay_rows, stay_end, exit_rows, exit_code, exit_pos = [], [], [], [], []
        j = 0
        while rows.size:
            cur = table[cur, trie.flat[trie.offsets[rows] + j]]
            j += 1
            out = cur < 0
            if out.any():
                exit_rows.append(rows[out])
                exit_code.append(-cur[out] - 1)
                exit_pos.append(np.full(int(out.sum()), j, dtype=np.int64))
            keep = cur > 0
            rows, cur = rows[keep], cur[keep]
            done = trie.lens[rows] == j
            if done.any():
                stay_rows.append(rows[done])
                stay_end.append(cur[done] - 1)
                rows, cur = rows[~done], cur[~done]
        empty = np.zeros(0, dtype=np.int64)
        srows = np.concatenate(stay_rows) if stay_rows else empty
        ids = trie.ids[srows]
        ends = np.concatenate(stay_end) if stay_end else empty
        erows = np.concatenate(exit_rows) if exit_rows else empty
        ecode = np.concatenate(exit_code) if exit_code else empty
        epos = np.concatenate(exit_pos) if exit_pos else empty
        exits = []
        for k in range(n_exits):
            sel = np.flatnonzero(ecode == k)
            r, p = erows[sel], epos[sel]
            at = trie.offsets[r] + p
            nxt_byte = trie.flat[np.minimum(at, trie.flat.size - 1)].astype(np.int64)
            nxt_byte[p >= trie.lens[r]] = 256  # nothing left after the exit
            exits.append((r, p, nxt_byte))
        return _Region(stay_ids=ids, stay_end=ends, packed=_pack([], [ids], trie.words, None), exits=exits)

    def reachable_states(self, limit: int | None = None) -> list[int]:
        """States reachable from the start by allowed tokens (breadth first), computing their entries."""
        seen = {self.start}
        queue = [self.start]
        i = 0
        while i < len(queue) and (limit is None or len(queue) < limit):
            _, nxt = self.transitions(queue[i])
            for s in np.unique(nxt).tolist():
                if s != FINAL and s not in seen:
                    seen.add(s)
                    queue.append(s)
            i += 1
        return queue
