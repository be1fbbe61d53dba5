"""llama.cpp as a model backend: a GGUF file runs natively through llama-cpp-python, guided by tooldec.

`LlamaCppModel` answers the Decoder's forward call (`model(input_ids=..., past_key_values=..., ...)`) for one
row: llama.cpp keeps the KV cache itself, so each call evaluates only the new tokens and returns the last
position's logits, to which the policy's packed mask is applied exactly as with transformers. The vocabulary's
token bytes are read from the GGUF file (llama.cpp's token pieces) and checked against the tokenizer's, so a
mask bit always means the same bytes to the model and to the grammar. Install with `pip install
"tooldec[llamacpp]"` (llama-cpp-python builds from source: minutes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from tooldec.backends.embedded import EMBEDDED_MODELS, fetch_model
from tooldec.backends.loader import LoadedModel, ModelLoadError, idle_cores
from tooldec.backends.progress import Stages, quiet_libraries
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


def gguf_token_bytes(llama: Any) -> list[bytes]:
    """Every token's bytes as llama.cpp reads them from the GGUF file (special tokens as their text, no space
    stripped): `llama_token_to_piece` token by token."""
    import ctypes

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


def load_llamacpp(
    name_or_path: str | Path, *, threads: int | None = None, n_ctx: int = 4096, progress: bool = False
) -> LoadedModel:
    """Load a GGUF file (or an embedded model's) into llama.cpp, with its tokenizer and a checked vocabulary."""
    try:
        import llama_cpp
        import transformers
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
    with Stages(enabled=progress).stage("load", f"{path.name} (llama.cpp)"), quiet_libraries():
        llama = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=threads or idle_cores(),
            verbose=False,
            logits_all=False,
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        vocab = gguf_vocabulary(llama, tokenizer)
    name = spec if spec in EMBEDDED_MODELS else path.name
    return LoadedModel(
        LlamaCppModel(llama), tokenizer, vocab, name, source, time.perf_counter() - start, "llamacpp"
    )
