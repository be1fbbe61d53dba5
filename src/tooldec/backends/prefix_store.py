"""A warm start across runs: the model's state after a prompt prefix that never changes, kept on disk.

`tooldec run` starts every question with the same few-shot examples and tool list (~900 tokens of FuncQA
examples); prefilling them is most of a short answer's time on a CPU. `PrefixStore.get` computes that prefix's
state once per (model, prefix tokens, library versions), saves it under the tooldec cache (`prefixes/`), and
later runs load it instead.

One store, two kinds of payload: a `PrefixKind` says what identifies a model's numbers and how its state is
computed, written and read back (`TorchPrefixes`: the transformers backend's KV tensors;
`tooldec.backends.llamacpp.LlamaPrefixes`: llama.cpp's sequence state). The store does the rest for both: the
key, a header that must match (format, key, kind, tokens, payload size and checksum), the atomic write (a
temporary name, then a rename, so a reader never sees half a file), ignoring and rewriting a file that cannot
be read or does not match, and the bound on the folder's total size (least recently used files go first).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
import struct
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import torch

from tooldec.backends.cache import cache_dir
from tooldec.decoding.prefix import PromptPrefix

log = logging.getLogger(__name__)

FORMAT = 2
MAGIC = b"tooldec prefix\n"
SUFFIX = ".prefix"
DEFAULT_MAX_BYTES = 512 << 20
"""Total size of the stored prefixes (`$TOOLDEC_PREFIX_CACHE_MB` overrides): for Qwen2.5-0.5B ~25 KB a token
under transformers (float32), ~12 KB under llama.cpp (float16 KV)."""


def library_version(package: str) -> str:
    """The installed version of `package`, or "none": part of every key, so an upgrade never reads old state."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


class PrefixKind(Protocol):
    """One backend's prefix state: what identifies it, how it is computed, and its bytes on disk."""

    name: str

    def identity(self) -> dict[str, Any]:
        """What must be the same for a stored state to be this model's: model, settings, library versions."""
        ...

    def build(self, tokens: Sequence[int]) -> PromptPrefix:
        """Run the model over `tokens` and keep its state."""
        ...

    def dump(self, prefix: PromptPrefix) -> bytes:
        """The payload written to disk for `prefix`."""
        ...

    def parse(self, payload: bytes, tokens: tuple[int, ...]) -> PromptPrefix:
        """The prefix of `tokens` from a stored payload; raises if it does not fit this model."""
        ...


def model_fingerprint(model: Any) -> str:
    """What identifies a transformers model's numbers: its config, dtype, and the size and time of its weight
    files."""
    config = model.config.to_dict()
    config.pop("_name_or_path", None)
    parts: dict[str, Any] = {"config": config, "dtype": str(next(model.parameters()).dtype)}
    folder = Path(str(getattr(model.config, "_name_or_path", "") or ""))
    if folder.is_dir():
        parts["files"] = sorted(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.iterdir()
            if p.suffix in (".safetensors", ".bin", ".pt")
        )
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class TorchPrefixes:
    """The transformers backend's prefix state: every layer's keys and values, saved with torch."""

    name = "transformers"

    def __init__(self, model: Any) -> None:
        """Prefixes of `model`, a transformers causal LM (or one with its forward signature and config)."""
        self.model = model

    def identity(self) -> dict[str, Any]:
        """The model's fingerprint and the installed tooldec, torch and transformers."""
        return {
            "model": model_fingerprint(self.model),
            "versions": [library_version(p) for p in ("tooldec", "torch", "transformers")],
        }

    def build(self, tokens: Sequence[int]) -> PromptPrefix:
        """One forward pass over `tokens`, keeping its KV cache."""
        return PromptPrefix.build(self.model, tokens)

    def dump(self, prefix: PromptPrefix) -> bytes:
        """Every layer's keys and values as one torch file."""
        buffer = io.BytesIO()
        torch.save(
            {
                "keys": [k.contiguous() for k, _ in prefix.layers],
                "values": [v.contiguous() for _, v in prefix.layers],
            },
            buffer,
        )
        return buffer.getvalue()

    def parse(self, payload: bytes, tokens: tuple[int, ...]) -> PromptPrefix:
        """The layers of a torch payload, on the model's device; raises if a layer does not hold `tokens`."""
        device = next(self.model.parameters()).device
        data = torch.load(io.BytesIO(payload), map_location=device, weights_only=True)
        layers = tuple(zip(data["keys"], data["values"], strict=True))
        if not layers:
            raise ValueError("no layers")
        for k, v in layers:
            if k.shape != v.shape or k.dim() != 4 or k.shape[0] != 1 or k.shape[2] != len(tokens):
                raise ValueError(f"a layer has shape {tuple(k.shape)} / {tuple(v.shape)}")
        return PromptPrefix(tokens, layers)


def prefix_kind(model: Any) -> PrefixKind:
    """How `model`'s prefixes are stored: its own kind where its backend has one (llama.cpp), else
    transformers'."""
    own = getattr(model, "prefix_kind", None)
    return own() if callable(own) else TorchPrefixes(model)


def stable_prefix(encode: Callable[[str], list[int]], render: Callable[[str], str]) -> list[int]:
    """The tokens every prompt `render(question)` starts with, whatever the question.

    The text common to two renders is encoded and its last token dropped: a tokenizer may merge the end of the
    common text with the question's first characters, never anything before.
    """
    first, second = render("\x00first question?"), render("\x01Second one.")
    same = 0
    while same < min(len(first), len(second)) and first[same] == second[same]:
        same += 1
    return encode(first[:same])[:-1] if same else []


class PrefixStore:
    """Prompt prefixes' states on disk, one file each, at most `max_bytes` in all."""

    def __init__(self, folder: Path | None = None, *, max_bytes: int | None = None) -> None:
        """Keep files in `folder` (default: the tooldec cache's `prefixes/`)."""
        self.folder = folder if folder is not None else cache_dir("prefixes")
        self.folder.mkdir(parents=True, exist_ok=True)
        if max_bytes is None:
            max_bytes = int(
                float(os.environ.get("TOOLDEC_PREFIX_CACHE_MB", DEFAULT_MAX_BYTES >> 20)) * (1 << 20)
            )
        self.max_bytes = max_bytes

    def key(self, kind: PrefixKind, tokens: Sequence[int]) -> str:
        """The hex key of `tokens`' prefix under `kind`'s model, settings and libraries."""
        parts = {"format": FORMAT, "kind": kind.name, "identity": kind.identity(), "tokens": list(tokens)}
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def path(self, key: str) -> Path:
        """The file that holds the prefix of `key`."""
        return self.folder / f"{key[:32]}{SUFFIX}"

    def get(self, kind: PrefixKind, tokens: Sequence[int]) -> tuple[PromptPrefix, bool]:
        """The prefix of `tokens`: read from disk if stored (True), else computed and stored (False)."""
        key = self.key(kind, tokens)
        prefix = self.load(kind, key, tokens)
        if prefix is not None:
            return prefix, True
        prefix = kind.build(tokens)
        self.save(kind, key, prefix)
        return prefix, False

    def load(self, kind: PrefixKind, key: str, tokens: Sequence[int]) -> PromptPrefix | None:
        """The stored prefix of `key`, or None if there is none or it is unreadable or does not match (then the
        file is deleted, to be rewritten)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read stored prefix %s: %s", path.name, exc)
            return None
        try:
            prefix = kind.parse(_unpack(data, kind.name, key, tuple(tokens)), tuple(tokens))
        except Exception as exc:  # noqa: BLE001 - any bad file is a miss: it is rebuilt and rewritten
            log.warning("ignoring stored prefix %s: %s", path.name, exc)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # recently used: evicted last
        return prefix

    def save(self, kind: PrefixKind, key: str, prefix: PromptPrefix) -> Path | None:
        """Write `prefix` under `key` (temporary file, then rename) and evict the oldest files past the bound;
        None where it is larger than the bound or the disk refuses it."""
        payload = kind.dump(prefix)
        header = {
            "format": FORMAT,
            "kind": kind.name,
            "key": key,
            "tokens": list(prefix.tokens),
            "payload_bytes": len(payload),
            "blake2b": hashlib.blake2b(payload).hexdigest(),
        }
        head = json.dumps(header).encode()
        if len(MAGIC) + 8 + len(head) + len(payload) > self.max_bytes:
            return None
        path = self.path(key)
        tmp: Path | None = None
        try:
            fd, name = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
            tmp = Path(name)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + struct.pack("<Q", len(head)) + head)
                f.write(payload)
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk costs the warm start, not the answer
            log.warning("could not store prefix %s: %s", path.name, exc)
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            return None
        self.evict(keep=path)
        return path

    def evict(self, keep: Path | None = None) -> None:
        """Delete the least recently used files until the folder holds at most `max_bytes` (every file in it
        counts, of either kind or an older format; temporary files being written do not)."""
        files = []
        for p in self.folder.iterdir():
            if p.name.startswith("."):
                continue
            try:
                st = p.stat()
            except FileNotFoundError:  # another process evicted it
                continue
            if stat.S_ISREG(st.st_mode):
                files.append((st.st_mtime_ns, st.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files, key=lambda f: f[0]):
            if total <= self.max_bytes:
                break
            if p != keep:
                p.unlink(missing_ok=True)
                total -= size


def _unpack(data: bytes, kind: str, key: str, tokens: tuple[int, ...]) -> bytes:
    """The payload of a stored file whose header matches (format, kind, key, tokens, size, checksum); raises
    ValueError otherwise."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise ValueError("not a tooldec prefix file")
    (size,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8 + size
    header = json.loads(data[len(MAGIC) + 8 : start])
    payload = data[start:]
    if (header["format"], header["kind"], header["key"]) != (FORMAT, kind, key):
        raise ValueError("the file belongs to another prefix, kind or format")
    if tuple(header["tokens"]) != tokens:
        raise ValueError("the file holds other tokens")
    if header["payload_bytes"] != len(payload) or header["blake2b"] != hashlib.blake2b(payload).hexdigest():
        raise ValueError("the payload is truncated or corrupt")
    return payload


def warm_prefix(
    model: Any,
    encode: Callable[[str], list[int]],
    render: Callable[[str], str],
    store: PrefixStore | None = None,
) -> tuple[PromptPrefix | None, bool]:
    """The stored (True) or newly stored (False) state after what every `render(question)` starts with, for
    either backend's model; None if the prompts share no token."""
    tokens = stable_prefix(encode, render)
    if not tokens:
        return None, False
    return (store or PrefixStore()).get(prefix_kind(model), tokens)
