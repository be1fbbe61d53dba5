"""The model's vocabulary as raw bytes per token id, worked out from a Hugging Face `tokenizers` tokenizer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models

from tooldec.errors import VocabularyError

COMMON_EOS_TOKENS = (
    "</s>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|im_end|>",
    "<eos>",
    "<end_of_turn>",
)
"""Special tokens that end a sequence or a turn wherever a tokenizer defines them."""

_BYTE_LEVEL_STEPS = frozenset({"ByteLevel", "Fuse", "Strip"})
_SENTENCEPIECE_MARKERS = frozenset({"Replace", "ByteFallback", "Metaspace"})
_SENTENCEPIECE_STEPS = _SENTENCEPIECE_MARKERS | {"Fuse", "Strip"}
_FALLBACK_BYTES = {f"<0x{b:02X}>": bytes([b]) for b in range(256)}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from each byte to the printable character byte-level BPE writes it as."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in table):
        table[b] = chr(256 + n)
    return table


def _byte_level_table() -> dict[int, str]:
    """str.translate table turning byte-level characters into latin-1 ones; other characters become U+FFFD."""
    table = {ord(char): chr(b) for b, char in _bytes_to_unicode().items()}
    table.update({c: "\ufffd" for c in range(256) if c not in table})
    return table


_BYTE_LEVEL_TABLE = _byte_level_table()


def _steps(component: Any, key: str) -> list[dict[str, Any]]:
    """A tokenizer component's JSON as a flat list of steps (a Sequence is unrolled), [] for none."""
    if component is None:
        return []
    state = json.loads(component.__getstate__())
    pending, steps = [state], []
    while pending:
        step = pending.pop(0)
        if step.get("type") == "Sequence":
            pending[:0] = step[key]
        else:
            steps.append(step)
    return steps


def _byte_level(token: str) -> bytes:
    """The bytes a byte-level BPE token string stands for."""
    try:
        return token.translate(_BYTE_LEVEL_TABLE).encode("latin-1")
    except UnicodeEncodeError:
        raise VocabularyError(f"token {token!r} is not written in the byte-level alphabet") from None


def _sentencepiece(replacements: list[tuple[str, str]], byte_fallback: bool) -> Callable[[str], bytes]:
    """Mapper for SentencePiece-style tokens: `<0xNN>` is byte NN (with byte fallback), `▁` a space."""

    def to_bytes(token: str) -> bytes:
        if byte_fallback and token in _FALLBACK_BYTES:
            return _FALLBACK_BYTES[token]
        for old, new in replacements:
            token = token.replace(old, new)
        return token.encode()

    return to_bytes


def _token_mapper(tok: Tokenizer) -> Callable[[str], bytes]:
    """How the model's token strings map to bytes, read from the decoder (else pre-tokenizer) JSON."""
    steps = _steps(tok.decoder, "decoders")
    if not steps:
        steps = [
            s for s in _steps(tok.pre_tokenizer, "pretokenizers") if s["type"] in ("ByteLevel", "Metaspace")
        ]
    kinds = {step["type"] for step in steps}
    byte_fallback = bool(getattr(tok.model, "byte_fallback", False))
    if "ByteLevel" in kinds:
        if not kinds <= _BYTE_LEVEL_STEPS:
            raise VocabularyError(f"byte-level decoder mixed with {sorted(kinds - _BYTE_LEVEL_STEPS)}")
        return _byte_level
    if kinds & _SENTENCEPIECE_MARKERS or byte_fallback:
        if not kinds <= _SENTENCEPIECE_STEPS:
            raise VocabularyError(
                f"SentencePiece-style decoder mixed with {sorted(kinds - _SENTENCEPIECE_STEPS)}"
            )
        replacements = []
        for step in steps:
            if step["type"] == "Metaspace":
                replacements.append((step["replacement"], " "))
            elif step["type"] == "Replace":
                if "String" not in step["pattern"]:
                    raise VocabularyError(f"decoder Replace with a regex pattern is not supported: {step}")
                replacements.append((step["pattern"]["String"], step["content"]))
        return _sentencepiece(replacements, byte_fallback or "ByteFallback" in kinds)
    if kinds:
        raise VocabularyError(f"cannot map tokens to bytes through decoder steps {sorted(kinds)}")
    if (
        isinstance(tok.model, models.WordPiece)
        or getattr(tok.model, "continuing_subword_prefix", None)
        or getattr(tok.model, "end_of_word_suffix", None)
    ):
        raise VocabularyError("tokens with word-piece prefixes or suffixes cannot be mapped to bytes")
    return str.encode


def _configured_eos(folder: Path) -> tuple[list[str], list[int]]:
    """EOS names from tokenizer_config.json and EOS ids from generation_config.json / config.json in `folder`."""

    def load(name: str) -> dict[str, Any]:
        path = folder / name
        if not path.is_file():
            return {}
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise VocabularyError(f"cannot read {path}: {exc}") from exc

    names = []
    eos_token = load("tokenizer_config.json").get("eos_token")
    if isinstance(eos_token, dict):
        eos_token = eos_token.get("content")
    if isinstance(eos_token, str):
        names.append(eos_token)
    ids = []
    for name in ("generation_config.json", "config.json"):
        eos_id = load(name).get("eos_token_id")
        ids.extend(eos_id if isinstance(eos_id, list) else [] if eos_id is None else [eos_id])
    return names, ids


class Vocabulary:
    """Every logits column's token as bytes (None for control tokens), plus EOS and special token ids."""

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_ids: Iterable[int],
        special_ids: dict[str, int] | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        """Hold `token_bytes` (EOS entries forced to None: they are never text) and the ids around them."""
        self.token_bytes: list[bytes | None] = list(token_bytes)
        self.size = len(self.token_bytes)
        self.eos_ids = frozenset(eos_ids)
        if not self.eos_ids:
            raise VocabularyError("no EOS token")
        for eos_id in self.eos_ids:
            if not 0 <= eos_id < self.size:
                raise VocabularyError(f"EOS id {eos_id} is outside the vocabulary of {self.size}")
            self.token_bytes[eos_id] = None
        self.special_ids = dict(special_ids or {})
        self.tokenizer = tokenizer

    def __repr__(self) -> str:
        """Size and EOS ids, not the tokens."""
        return f"Vocabulary(size={self.size}, eos_ids={sorted(self.eos_ids)})"

    @classmethod
    def from_tokenizers(
        cls, tok: Tokenizer, *, vocab_size: int | None = None, eos_tokens: Iterable[str] | None = None
    ) -> Vocabulary:
        """Vocabulary of a `tokenizers.Tokenizer`; EOS from `eos_tokens`, else the common EOS names it has."""
        return cls._build(tok, vocab_size, eos_tokens, [], [])

    @classmethod
    def from_file(
        cls, path: str | Path, *, vocab_size: int | None = None, eos_tokens: Iterable[str] | None = None
    ) -> Vocabulary:
        """Vocabulary of a tokenizer.json (or a folder holding one), with EOS from the configs beside it."""
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise VocabularyError(f"no tokenizer file at {file}")
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as exc:
            raise VocabularyError(f"cannot load tokenizer {file}: {exc}") from exc
        eos_names, eos_ids = _configured_eos(file.parent)
        return cls._build(tok, vocab_size, eos_tokens, eos_names, eos_ids)

    @classmethod
    def from_hf(cls, hf_tokenizer: Any, *, vocab_size: int | None = None) -> Vocabulary:
        """Vocabulary of a transformers fast tokenizer, through its backend tokenizer and eos_token_id."""
        eos_id = getattr(hf_tokenizer, "eos_token_id", None)
        return cls._build(
            hf_tokenizer.backend_tokenizer, vocab_size, None, [], [] if eos_id is None else [eos_id]
        )

    @classmethod
    def from_bytes(cls, tokens: Sequence[bytes | None], *, eos_id: int) -> Vocabulary:
        """Vocabulary given token by token (tests, toy models); the entry at `eos_id` becomes None."""
        return cls(tokens, [eos_id])

    @classmethod
    def _build(
        cls,
        tok: Tokenizer,
        vocab_size: int | None,
        eos_tokens: Iterable[str] | None,
        eos_names: list[str],
        eos_ids: list[int],
    ) -> Vocabulary:
        """Map every token to bytes and resolve EOS: explicit names, else configured ones plus common names."""
        to_bytes = _token_mapper(tok)
        vocab = tok.get_vocab(with_added_tokens=False)
        added = tok.get_added_tokens_decoder()
        needed = max(max(vocab.values(), default=-1), max(added, default=-1)) + 1
        size = needed if vocab_size is None else vocab_size
        if size < needed:
            raise VocabularyError(f"vocab_size {size} is smaller than the tokenizer's {needed} ids")
        token_bytes: list[bytes | None] = [None] * size
        for token, token_id in vocab.items():
            token_bytes[token_id] = to_bytes(token)
        special_ids = {}
        for token_id, added_token in added.items():
            if added_token.special:
                token_bytes[token_id] = None
                special_ids[added_token.content] = token_id
            else:
                token_bytes[token_id] = added_token.content.encode()

        def resolve(name: str) -> int:
            token_id = special_ids.get(name, tok.token_to_id(name))
            if token_id is None:
                raise VocabularyError(f"EOS token {name!r} is not in the vocabulary")
            return token_id

        if eos_tokens is not None:
            eos = {resolve(name) for name in eos_tokens}
        else:
            eos = {resolve(name) for name in eos_names} | set(eos_ids)
            eos |= {special_ids[name] for name in COMMON_EOS_TOKENS if name in special_ids}
        if not eos:
            raise VocabularyError(
                f"no EOS token found; pass eos_tokens (none of {COMMON_EOS_TOKENS} is special)"
            )
        return cls(token_bytes, eos, special_ids, tok)

    def encode(self, text: str | bytes) -> list[int]:
        """Token ids whose bytes concatenate to exactly `text`: the tokenizer's own split when it fits."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        if not data:
            return []
        if self.tokenizer is not None:
            try:
                string = text if isinstance(text, str) else data.decode()
            except UnicodeDecodeError:
                return self._greedy(data)
            ids = self.tokenizer.encode(string, add_special_tokens=False).ids
            pieces = [piece for i in ids if (piece := self.token_bytes[i]) is not None]
            if len(pieces) == len(ids):  # no special token matched inside the text
                joined = b"".join(pieces)
                if joined == data:
                    return ids
                if joined.endswith(data):  # e.g. a SentencePiece `▁` prepended to the text
                    return self._drop_prefix(ids, pieces, len(joined) - len(data))
        return self._greedy(data)

    def _drop_prefix(self, ids: list[int], pieces: list[bytes], extra: int) -> list[int]:
        """`ids` without their first `extra` bytes; the token cut in two has its tail re-encoded greedily."""
        k = 0
        while extra >= len(pieces[k]):
            extra -= len(pieces[k])
            k += 1
        head = self._greedy(pieces[k][extra:]) if extra else [ids[k]]
        return head + ids[k + 1 :]

    @cached_property
    def _byte_index(self) -> tuple[dict[bytes, int], list[int]]:
        """Lowest id of each token's bytes, and the longest token starting with each byte, for greedy encoding."""
        index: dict[bytes, int] = {}
        longest = [0] * 256
        for token_id in range(self.size - 1, -1, -1):
            token = self.token_bytes[token_id]
            if token:
                index[token] = token_id
                longest[token[0]] = max(longest[token[0]], len(token))
        return index, longest

    def _greedy(self, data: bytes) -> list[int]:
        """Longest-match encoding of `data` over the token bytes."""
        index, longest = self._byte_index
        ids, start, end = [], 0, len(data)
        while start < end:
            for stop in range(min(end, start + longest[data[start]]), start, -1):
                token_id = index.get(data[start:stop])
                if token_id is not None:
                    ids.append(token_id)
                    start = stop
                    break
            else:
                raise VocabularyError(f"no token for byte {data[start]:#04x} at offset {start} of {data!r}")
        return ids

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of `ids` joined; control tokens (None) contribute nothing."""
        parts = []
        for token_id in ids:
            if not 0 <= token_id < self.size:
                raise VocabularyError(f"token id {token_id} is outside the vocabulary of {self.size}")
            token = self.token_bytes[token_id]
            if token:
                parts.append(token)
        return b"".join(parts)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex of the token bytes and EOS ids: a cache key for anything derived from the vocabulary."""
        parts = [len(self.token_bytes).to_bytes(8, "little")]
        for token in self.token_bytes:
            if token is None:
                parts.append(b"\xff\xff\xff\xff")
            else:
                parts.extend((len(token).to_bytes(4, "little"), token))
        parts.extend(eos_id.to_bytes(8, "little") for eos_id in sorted(self.eos_ids))
        return hashlib.sha256(b"".join(parts)).hexdigest()
