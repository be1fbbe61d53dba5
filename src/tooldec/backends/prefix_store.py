"""A warm start across runs: the KV cache of a prompt prefix that never changes, kept on disk.

`tooldec run` starts every question with the same few-shot examples and tool list (about 300 tokens of FuncQA
examples); prefilling them is most of a short answer's time on a CPU. `PrefixStore.get` computes that prefix's
KV cache once per (model, prefix tokens, library versions), saves it under the tooldec cache (`prefixes/`), and
later runs load it instead. Files are written to a temporary name and renamed, so a reader never sees half a
file; a file that cannot be read or does not match what was asked is ignored and rewritten. The folder is
bounded in total size: the least recently used files go first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from tooldec.backends.cache import cache_dir
from tooldec.decoding.prefix import PromptPrefix

log = logging.getLogger(__name__)

FORMAT = 1
DEFAULT_MAX_BYTES = 512 << 20
"""Total size of the stored prefixes (`$TOOLDEC_PREFIX_CACHE_MB` overrides): ~25 KB a token for Qwen2.5-0.5B."""


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def model_fingerprint(model: Any) -> str:
    """What identifies a model's numbers: its config, dtype, and the size and time of its weight files."""
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
    """Prompt prefixes' KV caches on disk, one file each, at most `max_bytes` in all."""

    def __init__(self, folder: Path | None = None, *, max_bytes: int | None = None) -> None:
        """Keep files in `folder` (default: the tooldec cache's `prefixes/`)."""
        self.folder = folder if folder is not None else cache_dir("prefixes")
        self.folder.mkdir(parents=True, exist_ok=True)
        if max_bytes is None:
            max_bytes = int(
                float(os.environ.get("TOOLDEC_PREFIX_CACHE_MB", DEFAULT_MAX_BYTES >> 20)) * (1 << 20)
            )
        self.max_bytes = max_bytes

    def key(self, model: Any, tokens: Sequence[int]) -> str:
        """The hex key of `tokens`' prefix under `model` and the installed tooldec, torch and transformers."""
        parts = {
            "format": FORMAT,
            "model": model_fingerprint(model),
            "tokens": list(tokens),
            "versions": [_version(p) for p in ("tooldec", "torch", "transformers")],
        }
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def path(self, key: str) -> Path:
        """The file that holds the prefix of `key`."""
        return self.folder / f"{key[:32]}.pt"

    def get(self, model: Any, tokens: Sequence[int]) -> tuple[PromptPrefix, bool]:
        """The prefix of `tokens`: read from disk if stored (True), else computed and stored (False)."""
        key = self.key(model, tokens)
        device = next(model.parameters()).device
        prefix = self.load(key, tokens, device)
        if prefix is not None:
            return prefix, True
        prefix = PromptPrefix.build(model, tokens)
        self.save(key, prefix)
        return prefix, False

    def load(
        self, key: str, tokens: Sequence[int], device: torch.device | str = "cpu"
    ) -> PromptPrefix | None:
        """The stored prefix of `key`, or None if there is none or it is unreadable or does not match."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            data = torch.load(path, map_location=device, weights_only=True)
            layers = tuple(zip(data["keys"], data["values"], strict=True))
            stored = tuple(data["tokens"].tolist())
            if data["format"] != FORMAT or data["key"] != key or stored != tuple(tokens) or not layers:
                raise ValueError("the file belongs to another prefix")
            for k, v in layers:
                if k.shape != v.shape or k.dim() != 4 or k.shape[0] != 1 or k.shape[2] != len(stored):
                    raise ValueError(f"a layer has shape {tuple(k.shape)} / {tuple(v.shape)}")
        except Exception as exc:  # noqa: BLE001 - any bad file is a miss: it is rebuilt and rewritten
            log.warning("ignoring stored prefix %s: %s", path.name, exc)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # recently used: evicted last
        return PromptPrefix(stored, layers)

    def save(self, key: str, prefix: PromptPrefix) -> Path | None:
        """Write `prefix` under `key` (temporary file, then rename) and evict the oldest files past the bound."""
        data = {
            "format": FORMAT,
            "key": key,
            "tokens": torch.tensor(prefix.tokens, dtype=torch.int64),
            "keys": [k.contiguous() for k, _ in prefix.layers],
            "values": [v.contiguous() for _, v in prefix.layers],
        }
        size = sum(t.numel() * t.element_size() for t in (*data["keys"], *data["values"]))
        if size > self.max_bytes:
            return None
        path = self.path(key)
        tmp: Path | None = None
        try:
            fd, name = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
            tmp = Path(name)
            with os.fdopen(fd, "wb") as f:
                torch.save(data, f)
            os.replace(tmp, path)
        except OSError as exc:  # a full or read-only disk costs the warm start, not the answer
            log.warning("could not store prefix %s: %s", path.name, exc)
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            return None
        self.evict(keep=path)
        return path

    def evict(self, keep: Path | None = None) -> None:
        """Delete the least recently used files until the folder holds at most `max_bytes`."""
        files = []
        for p in self.folder.glob("*.pt"):
            try:
                st = p.stat()
            except FileNotFoundError:  # another process evicted it
                continue
            files.append((st.st_mtime_ns, st.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files, key=lambda f: f[0]):
            if total <= self.max_bytes:
                break
            if p != keep:
                p.unlink(missing_ok=True)
                total -= size


def warm_prefix(
    model: Any,
    encode: Callable[[str], list[int]],
    render: Callable[[str], str],
    store: PrefixStore | None = None,
) -> tuple[PromptPrefix | None, bool]:
    """The stored (True) or newly stored (False) KV cache of what every `render(question)` starts with; None if
    the prompts share no token."""
    tokens = stable_prefix(encode, render)
    if not tokens:
        return None, False
    return (store or PrefixStore()).get(model, tokens)
