"""A GGUF file's tokenizer, built in about a second from its metadata with the `tokenizers` library.

transformers reads a GGUF tokenizer (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) by parsing the file's
metadata with the `gguf` package in Python, element by element (~30 s for Qwen2.5's 151,936 tokens and 151,387
merges at load 7). `read_metadata` reads the same key/value section with `struct` over a memory map (strings
decoded straight from the map, numeric arrays as numpy views, the tensor table never touched); `fast_tokenizer`
builds from it the tokenizer transformers would build, for the files it knows exactly how to: a byte-level BPE
(`tokenizer.ggml.model` = `gpt2`) whose pre-tokenizer (`tokenizer.ggml.pre`) is Qwen2's or Llama 3's split.
For any other file it returns None, and the caller takes transformers' path: never a tokenizer that might differ.

What it builds is the tokenizer transformers 5's GGUF path builds (and llama.cpp's, which normalises nothing):
  - the vocabulary as the file spells it (a token outside the byte alphabet respelled byte by byte), the merges
    as the file lists them, BPE with no unknown token, no normaliser, the byte-level decoder;
  - the pre-tokenizer: the model's split regex (isolated) then ByteLevel without its own regex;
  - CONTROL tokens (type 3) added as special, USER_DEFINED ones (type 4) as plain added tokens, both matched
    whole; the bos/eos/unk/padding tokens the file names by id, the chat template and add_bos/add_eos flags.
The tests (tests/test_gguf_tokenizer.py) check it equal to transformers' on files written there, and a script
(benchmarks/gguf_tokenizer_check.py) on the embedded models' own files.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

# GGUF value types: the fixed-width ones (their struct format, which numpy reads as the same dtype), then
# 8 = string, 9 = array
_SCALAR = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")

# llama.cpp's token types (tokenizer.ggml.token_type)
CONTROL, USER_DEFINED = 3, 4

# The split each `tokenizer.ggml.pre` names, as transformers and llama.cpp split (llama-vocab.cpp): Qwen2's and
# Llama 3's. Any other name (or none) is left to transformers.
QWEN2_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_SPLITS = {
    "qwen2": QWEN2_SPLIT,
    "deepseek-r1-qwen": QWEN2_SPLIT,
    "llama3": LLAMA3_SPLIT,
    "llama-v3": LLAMA3_SPLIT,
    "llama-bpe": LLAMA3_SPLIT,
}

# the metadata keys the tokenizer is built from; every other array is skipped over, not read
TOKENIZER_KEYS = frozenset(
    {
        "general.architecture",
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.ggml.add_eos_token",
        "tokenizer.chat_template",
    }
)


class GgufFormatError(ValueError):
    """A file this reader cannot read as GGUF (not one, another version, another byte order, cut short)."""


def read_metadata(path: Path, keys: frozenset[str] | None = TOKENIZER_KEYS) -> dict[str, Any]:
    """The GGUF file's metadata (only `keys`, or every key if None): numbers and strings as Python values, an
    array of strings as a list of str, an array of numbers as a numpy array. Little-endian GGUF v2 and v3."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as blob:
        try:
            return _read(blob, keys)
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            raise GgufFormatError(f"{path}: unreadable GGUF metadata ({exc})") from exc


def _read(blob: mmap.mmap, keys: frozenset[str] | None) -> dict[str, Any]:
    if blob[:4] != b"GGUF":
        raise GgufFormatError("not a GGUF file (no magic)")
    (version,) = struct.unpack_from("<I", blob, 4)
    if version not in (2, 3):  # v1 counted in 32 bits; a big-endian file reads as a huge version
        raise GgufFormatError(f"GGUF version {version} (this reader takes little-endian v2 and v3)")
    _tensors, count = struct.unpack_from("<QQ", blob, 8)
    pos = 24
    out: dict[str, Any] = {}
    for _ in range(count):
        (length,) = _U64.unpack_from(blob, pos)
        key = blob[pos + 8 : pos + 8 + length].decode()
        (kind,) = struct.unpack_from("<I", blob, pos + 8 + length)
        value, pos = _value(blob, pos + 12 + length, kind, keys is None or key in keys)
        if keys is None or key in keys:
            out[key] = value
    return out


def _value(blob: mmap.mmap, pos: int, kind: int, wanted: bool) -> tuple[Any, int]:
    """The value of type `kind` at `pos` (None when not `wanted`, only skipped over) and the offset past it."""
    if kind in _SCALAR:
        fmt = _SCALAR[kind]
        return (struct.unpack_from(fmt, blob, pos)[0] if wanted else None), pos + struct.calcsize(fmt)
    if kind == _STRING:
        (length,) = _U64.unpack_from(blob, pos)
        end = _within(blob, pos + 8 + length)
        return (blob[pos + 8 : end].decode() if wanted else None), end
    if kind != _ARRAY:
        raise GgufFormatError(f"unknown GGUF value type {kind}")
    element, count = struct.unpack_from("<IQ", blob, pos)
    pos += 12
    if element in _SCALAR:
        dtype = np.dtype(_SCALAR[element])
        end = _within(blob, pos + count * dtype.itemsize)
        return (np.frombuffer(blob[pos:end], dtype=dtype) if wanted else None), end
    if element == _STRING:
        unpack = _U64.unpack_from
        if not wanted:
            for _ in range(count):
                pos += 8 + unpack(blob, pos)[0]
            return None, _within(blob, pos)
        strings: list[str] = []
        append = strings.append
        for _ in range(count):
            (length,) = unpack(blob, pos)
            pos += 8
            append(blob[pos : pos + length].decode())
            pos += length
        return strings, _within(blob, pos)
    if element == _ARRAY:  # arrays of arrays: llama.cpp writes none a tokenizer needs; walk them
        values = []
        for _ in range(count):
            value, pos = _value(blob, pos, _ARRAY, wanted)
            values.append(value)
        return (values if wanted else None), pos
    raise GgufFormatError(f"unknown GGUF array element type {element}")


def _within(blob: mmap.mmap, end: int) -> int:
    """`end`, checked to be within the file (a slice past it would read short, not fail)."""
    if end > len(blob):
        raise GgufFormatError("a value runs past the end of the file")
    return end


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (the byte-level BPE's spelling)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def unsupported(meta: dict[str, Any]) -> str | None:
    """Why `fast_tokenizer` would not build this file's tokenizer (None: it builds it)."""
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    if model != "gpt2":
        return f"tokenizer model {model!r} (only byte-level BPE, 'gpt2', is built here)"
    if pre not in PRE_TOKENIZER_SPLITS:
        return f"pre-tokenizer {pre!r} (built here: {', '.join(sorted(PRE_TOKENIZER_SPLITS))})"
    if not meta.get("tokenizer.ggml.tokens") or "tokenizer.ggml.merges" not in meta:
        return "no token list or no merges"
    if any(merge.count(" ") != 1 for merge in meta["tokenizer.ggml.merges"]):
        return "a merge that is not two tokens"
    return None


def build_backend(meta: dict[str, Any]) -> Any:
    """The `tokenizers.Tokenizer` of a supported file's metadata (see `unsupported`)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    spelling = _byte_alphabet()
    alphabet = frozenset(spelling.values())
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    vocab = {
        token if alphabet.issuperset(token) else "".join(spelling[b] for b in token.encode()): index
        for index, token in enumerate(tokens)
    }
    merges = [tuple(merge.split(" ")) for merge in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
    )
    split = PRE_TOKENIZER_SPLITS[meta["tokenizer.ggml.pre"]]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type")
    types = [] if types is None else types.tolist()
    # a CONTROL token spelled outside the byte alphabet is a mislabel transformers skips (it would add an id)
    control = [t for t, k in zip(tokens, types) if k == CONTROL and alphabet.issuperset(t)]
    if control:
        tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    user = [t for t, k in zip(tokens, types) if k == USER_DEFINED and t in vocab]  # as spelled, not respelled
    if user:
        tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
    return tok


def fast_tokenizer(path: Path) -> Any:
    """The GGUF file's tokenizer as a transformers `PreTrainedTokenizerFast` (chat template, bos/eos/unk/pad,
    add_bos/add_eos as the file states), or None where the file's tokenizer is not one built here exactly
    (`unsupported`) or its metadata cannot be read: the caller then takes transformers' own GGUF path."""
    import transformers

    # transformers 4 builds its GGUF tokenizers otherwise (Qwen2's with an NFC normaliser): left to it
    if int(transformers.__version__.split(".")[0]) < 5:
        return None
    try:
        meta = read_metadata(path)
    except (GgufFormatError, OSError):
        return None
    if unsupported(meta) is not None:
        return None
    backend = build_backend(meta)
    tokens = meta["tokenizer.ggml.tokens"]
    named: dict[str, Any] = {}
    for name, key in (
        ("bos_token", "bos"),
        ("eos_token", "eos"),
        ("unk_token", "unknown"),
        ("pad_token", "padding"),
    ):
        index = meta.get(f"tokenizer.ggml.{key}_token_id")
        named[name] = tokens[index] if index is not None and 0 <= index < len(tokens) else None
    extra = {
        k: bool(meta[f"tokenizer.ggml.{k}"])
        for k in ("add_bos_token", "add_eos_token")
        if f"tokenizer.ggml.{k}" in meta
    }
    template = meta.get("tokenizer.chat_template")
    if template is not None:
        extra["chat_template"] = template
    return wrap(backend, **named, **extra)


def wrap(backend: Any, **kwargs: Any) -> Any:
    """`PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)` without its deep copy of the backend (1.8 s
    for Qwen2.5's vocabulary at load 9: a round trip through JSON): transformers 5 takes a backend set on the
    instance before `__init__` as it is (its model tokenizers, Qwen2Tokenizer among them, are built that way)."""
    from transformers import PreTrainedTokenizerFast

    if getattr(PreTrainedTokenizerFast, "_tokenizer", 0) is not None:
        return PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)
    wrapper = PreTrainedTokenizerFast.__new__(PreTrainedTokenizerFast)
    wrapper._tokenizer = backend
    PreTrainedTokenizerFast.__init__(wrapper, **kwargs)
    return wrapper
