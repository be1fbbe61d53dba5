"""Load a causal LM with its tokenizer and tooldec Vocabulary from a local folder, a hub id or a GGUF file.

A GGUF file is dequantised by transformers (`gguf_file=`, needs the `gguf` package), which takes tens of
seconds, so the float copy is saved once under the cache and later loads read that copy in seconds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tooldec.backends.cache import cache_dir
from tooldec.backends.embedded import DEFAULT_MODEL, EMBEDDED_MODELS, fetch_model
from tooldec.backends.progress import Stages, quiet_libraries
from tooldec.compiler import Compiler
from tooldec.errors import ToolDecError
from tooldec.vocab import Vocabulary

log = logging.getLogger(__name__)


class ModelLoadError(ToolDecError):
    """A model that cannot be found, downloaded or loaded."""


@dataclass
class LoadedModel:
    """A causal LM ready to decode: the model, its HF tokenizer, tooldec's vocabulary, where it came from and
    what runs it (`transformers`, or `llamacpp`: tooldec.backends.llamacpp)."""

    model: Any
    tokenizer: Any
    vocab: Vocabulary
    name: str
    source: str
    load_seconds: float
    backend: str = "transformers"

    @cached_property
    def compiler(self) -> Compiler:
        """This model's compiler (its prepared vocabulary and grammar cache), made on first use and kept."""
        return Compiler(self.vocab)

    def render_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> str:
        """The prompt text of `messages` rendered by the model's chat template (tools included if given)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ModelLoadError(f"{self.name} has no chat template")
        text: str = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs
        )
        return text

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` with no special tokens added: a rendered chat prompt (its template wrote them) or
        a piece of prompt whose cost in tokens is counted."""
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def encode_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> list[int]:
        """Prompt token ids of `messages` rendered by the model's chat template (tools included if given)."""
        return self.encode(self.render_chat(messages, tools, **kwargs))


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ModelLoadError(
            "model backends need torch and transformers: pip install torch==2.13.0 'tooldec[models]'"
        ) from exc
    return transformers


def idle_cores() -> int:
    """The CPU cores other work leaves idle: this process's cores less the 1-minute load average, at least 1.

    On a busy machine torch's threads wait for each other: with the load at 8 on 2 cores, Qwen2.5-0.5B took
    1.2 s per token with 2 threads and 0.31 s with 1.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return cores
    return max(1, min(cores, cores - round(load)))


def gguf_key(path: Path) -> str:
    """A cache key for a GGUF file: its size and a hash of its first and last MiB (fast on large files)."""
    size = path.stat().st_size
    h = hashlib.sha256(f"{path.name}|{size}".encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:24]


def convert_gguf(path: Path, *, force: bool = False, progress: bool = False) -> Path:
    """The folder of a float copy of the GGUF model at `path`, converted on first use and cached.

    With `progress`, the conversion (tens of seconds, once) writes one line on stderr and transformers' own
    bars and warnings are silenced.
    """
    transformers = _require_transformers()
    target = cache_dir("converted", gguf_key(path))
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file() and not force:
        return target
    log.info("converting %s (first load only)", path)
    folder, name = str(path.parent), path.name
    stages = Stages(enabled=progress)
    with stages.stage("convert", f"{name} to float32, once"), quiet_libraries():
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
        except Exception as exc:
            raise ModelLoadError(f"cannot read GGUF file {path}: {exc}") from exc
        model.hf_quantizer = None  # the weights are dequantised floats now; save them as such
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def load_model(
    name_or_path: str | Path | None = None,
    *,
    threads: int | None = None,
    progress: bool = False,
    packed: bool = True,
) -> LoadedModel:
    """Load a model: None (DEFAULT_MODEL) or an embedded name (see EMBEDDED_MODELS), a folder, a .gguf file,
    or a hub id. With `progress`, every stage that runs (fetch, verify, unpack, convert, load) writes one line
    on stderr and third-party bars and warnings are silenced. With `packed`, its linear layers run on weights
    packed for oneDNN (tooldec.backends.packed_linear: the same products, about twice as fast on a CPU); packed
    weights stay on the CPU, so load with `packed=False` a model you will move to another device."""
    transformers = _require_transformers()
    import torch

    if threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    spec = str(name_or_path) if name_or_path is not None else DEFAULT_MODEL
    path = Path(spec).expanduser()
    if spec in EMBEDDED_MODELS:
        folder, source = convert_gguf(fetch_model(spec, progress=progress), progress=progress), f"embedded:{spec}"
    elif path.is_file() and path.suffix == ".gguf":
        folder, source = convert_gguf(path, progress=progress), f"gguf:{path}"
    elif path.is_dir():
        folder, source = path, f"folder:{path}"
    elif path.exists():
        raise ModelLoadError(f"{path} is neither a model folder nor a .gguf file")
    else:
        folder, source = Path(spec), f"hub:{spec}"
    with Stages(enabled=progress).stage("load", f"{spec} (float32)"), quiet_libraries():
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
            model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        except OSError as exc:
            hint = "" if path.exists() else " (not a local path; hub ids need internet access)"
            raise ModelLoadError(f"cannot load model {spec!r}{hint}: {exc}") from exc
    model.eval()
    vocab_size = model.get_output_embeddings().weight.shape[0]
    vocab = Vocabulary.from_hf(tokenizer, vocab_size=vocab_size)
    if packed:
        from tooldec.backends.packed_linear import pack_linears  # needs torch, like the rest of this function

        pack_linears(model)
    name = Path(spec).name if source.startswith(("gguf", "folder")) else spec
    return LoadedModel(model, tokenizer, vocab, name, source, time.perf_counter() - start)


BACKENDS = ("auto", "llamacpp", "transformers")


def choose_backend(backend: str, model: str | None) -> str:
    """The backend `auto` means for `model`: llama.cpp for a .gguf file or an embedded model (None: the
    default) when xllamacpp is installed, transformers for everything else (folders, hub ids)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    spec = model or DEFAULT_MODEL
    if spec not in EMBEDDED_MODELS and not (spec.endswith(".gguf") and Path(spec).expanduser().is_file()):
        return "transformers"
    from tooldec.backends.llamacpp import available

    return "llamacpp" if available() else "transformers"


def load_with(
    backend: str,
    model: str | None,
    *,
    threads: int | None = None,
    progress: bool = False,
    sequences: int = 1,
    n_ctx: int = 4096,
    kv_split: bool = False,
) -> LoadedModel:
    """Load `model` (None: DEFAULT_MODEL) with `backend` (`choose_backend`'s names); `sequences`, `n_ctx` and
    `kv_split` shape llama.cpp's context (rows decoded together, KV cells they share or split: load_llamacpp)."""
    if choose_backend(backend, model) == "llamacpp":
        from tooldec.backends.llamacpp import load_llamacpp

        return load_llamacpp(
            model or DEFAULT_MODEL, threads=threads, progress=progress, sequences=sequences, n_ctx=n_ctx,
            kv_split=kv_split,
        )
    return load_model(model, threads=threads, progress=progress)
