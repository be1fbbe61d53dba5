"""llama.cpp as a model backend: a GGUF file runs natively, quantised as it is, guided by tooldec.

llama.cpp comes prebuilt in the `xllamacpp` wheel (part of `pip install "tooldec[models]"`; its C API is called
through tooldec.backends.llama_api, one llama.cpp context per model in tooldec.backends.llama_context).
`LlamaCppModel` answers the Decoder's forward call (`model(input_ids=..., attention_mask=...,
past_key_values=...)`) for a batch of rows: row r is llama.cpp sequence r, every row's new tokens (padding left
out) run in one `llama_decode`, and the logits returned are a view of llama.cpp's output buffer, to which the
Decoder applies the policies' packed masks in place with the compiled core's kernel (no copy). The vocabulary's
token bytes are read from the GGUF file (llama.cpp's token pieces) and checked against the tokenizer's, so a
mask bit always means the same bytes to the model and to the grammar.

The warm start keeps llama.cpp's state of a sequence after a prompt prefix (`LlamaPrefixes`, one payload kind
of tooldec.backends.prefix_store): the KV cells as `llama_state_seq_get_data` writes them, which
`llama_state_seq_set_data` puts back exactly; the other rows of a batch share those cells (`seq_cp`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from tooldec.backends.cache import cache_dir
from tooldec.backends.embedded import EMBEDDED_MODELS, fetch_model
from tooldec.backends.gguf_tokenizer import fast_tokenizer
from tooldec.backends.llama_api import LlamaApiError
from tooldec.backends.llama_context import LlamaContext
from tooldec.backends.loader import LoadedModel, ModelLoadError, gguf_key, idle_cores
from tooldec.backends.prefix_store import library_version
from tooldec.backends.progress import Stages, quiet_libraries
from tooldec.decoding.prefix import PromptPrefix
from tooldec.vocab import Vocabulary


class _Session:
    """The Decoder's cache object for llama.cpp: the KV cells live in the context; this holds each row's
    length (row r is sequence r)."""

    def __init__(self, lengths: list[int]) -> None:
        """Rows holding `lengths` positions each."""
        self.lengths = lengths


class LlamaCppModel:
    """A llama.cpp context behind the forward signature tooldec's Decoder calls (a batch of rows, the last
    logits of each)."""

    def __init__(self, context: LlamaContext) -> None:
        """Decode with `context` (its sequences bound how many rows one call may hold)."""
        self.context = context
        self.config = SimpleNamespace(max_position_embeddings=context.n_ctx)
        """What the server reads of a model's configuration: the longest sequence (all KV cells)."""
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
        """Evaluate each row's new tokens (padding left out) after what its sequence holds. No cache or an empty
        one starts new sequences; the session this model returned goes on; any other cache raises ValueError.
        The logits are llama.cpp's buffer itself when every row added tokens (a copy otherwise: rows that added
        none, finished ones, get zeros, never sampled)."""
        n, width = input_ids.shape
        if n > self.context.sequences:
            raise ModelLoadError(
                f"{n} rows, but this llama.cpp context holds {self.context.sequences} sequences "
                "(load_llamacpp(..., sequences=N))"
            )
        session = self._session if past_key_values is self._session else None
        if session is None and not _empty(past_key_values):
            raise ValueError(
                "a llama.cpp model keeps its KV cache itself: start with no cache or an empty one, then pass the "
                "one it returned (rows that join and leave: model.continuous_batch)"
            )
        if session is None or len(session.lengths) != n:
            self.context.clear()
            session = self._session = _Session([0] * n)
        ids = input_ids.tolist()
        keep = attention_mask[:, -width:].bool().tolist() if attention_mask is not None else None
        rows = []
        for r in range(n):
            tokens = ids[r] if keep is None else [t for t, k in zip(ids[r], keep[r], strict=True) if k]
            if tokens:
                rows.append((r, session.lengths[r], tokens))
                session.lengths[r] += len(tokens)
        vocab = self.context.n_vocab
        if not rows:
            return SimpleNamespace(logits=torch.zeros((n, 1, vocab)), past_key_values=session)
        logits = torch.from_numpy(self.context.decode(rows))
        if len(rows) < n:
            full = torch.zeros((n, vocab))
            full[[r for r, _, _ in rows]] = logits
            logits = full
        return SimpleNamespace(logits=logits[:, None, :], past_key_values=session)

    forward = __call__
    """The same call: the Decoder reads the forward's signature to name its cache keyword (past_key_values)."""

    def build_prefix(self, tokens: Sequence[int]) -> LlamaPrefix:
        """The prefix of `tokens` (PromptPrefix.build's route for this backend): their sequence state."""
        return LlamaPrefixes(self).build(tokens)

    def prefix_kind(self) -> LlamaPrefixes:
        """How this model's prompt prefixes are stored (tooldec.backends.prefix_store)."""
        return LlamaPrefixes(self)

    def continuous_batch(self, decoder: Any, *, prefixes: int = 8) -> Any:
        """The server's continuous batch on this model (tooldec.backends.llamacpp_batch)."""
        from tooldec.backends.llamacpp_batch import LlamaBatch

        return LlamaBatch(decoder, prefixes=prefixes)

    def restore(self, state: bytes, rows: int, length: int) -> _Session:
        """Put a stored sequence state back as the first `length` positions of `rows` new sequences (sharing
        its cells), and start a session there."""
        self._session = None
        self.context.clear()
        self.context.set_state(0, state)
        self.context.drop(0, length)
        for r in range(1, rows):
            self.context.copy(0, r, length)
        self._session = _Session([length] * rows)
        return self._session


def _empty(cache: Any) -> bool:
    """Whether `cache` holds nothing a llama.cpp context could continue from (None, or an empty Hugging Face
    cache such as the Decoder's fresh GrowingCache); a session of this backend never is."""
    if cache is None:
        return True
    length = getattr(cache, "get_seq_length", None)
    return not isinstance(cache, _Session) and callable(length) and length() == 0


@dataclass(frozen=True)
class LlamaPrefix(PromptPrefix):
    """A prompt prefix under llama.cpp: no layers in Python, the sequence state after the prefix tokens instead;
    the Decoder's `cache` call puts it back into the model's context."""

    state: bytes = b""
    model: LlamaCppModel | None = None

    def head(self, length: int) -> LlamaPrefix:
        """The first `length` positions (the same state: `cache` keeps only the positions asked for)."""
        return LlamaPrefix(self.tokens[:length], (), self.state, self.model)

    def cache(self, batch: int, length: int) -> Any:
        """The model's session holding the first `length` prefix positions in each of `batch` rows."""
        if self.model is None:
            raise ModelLoadError("this llama.cpp prefix has no model to restore into")
        return self.model.restore(self.state, batch, length)


class LlamaPrefixes:
    """llama.cpp's prefix state for tooldec.backends.prefix_store: the sequence's KV cells, as llama.cpp writes
    them."""

    name = "llamacpp"

    def __init__(self, model: LlamaCppModel) -> None:
        """Prefixes of `model`'s GGUF file under its context's settings."""
        self.model = model

    def identity(self) -> dict[str, Any]:
        """The GGUF file (name, size, time, a hash of its ends), the context settings that shape the state (its
        size, sequences, batch size, KV types, attention kind) and the installed tooldec and xllamacpp."""
        context = self.model.context
        path = context.path
        stat = path.stat()
        return {
            "gguf": [path.name, stat.st_size, stat.st_mtime_ns, gguf_key(path)],
            "context": list(context.settings),
            "versions": [library_version(p) for p in ("tooldec", "xllamacpp")],
        }

    def build(self, tokens: Sequence[int]) -> LlamaPrefix:
        """Evaluate `tokens` from an empty context and take the sequence's state."""
        self.model._session = None
        context = self.model.context
        context.clear()
        context.decode([(0, 0, list(tokens))])
        return LlamaPrefix(tuple(tokens), (), context.state(0), self.model)

    def dump(self, prefix: PromptPrefix) -> bytes:
        """The sequence state's bytes."""
        if not isinstance(prefix, LlamaPrefix):
            raise TypeError(f"not a llama.cpp prefix: {type(prefix).__name__}")
        return prefix.state

    def parse(self, payload: bytes, tokens: tuple[int, ...]) -> LlamaPrefix:
        """A stored state, checked by loading it into the context: llama.cpp refuses one of another shape, and
        its last position must be the last prefix token's."""
        self.model.restore(payload, 1, len(tokens))
        last = self.model.context.last_position(0)
        if last != len(tokens) - 1:
            raise ValueError(f"the state ends at position {last}, not {len(tokens) - 1}")
        return LlamaPrefix(tokens, (), payload, self.model)


def check_vocabulary(gguf_bytes: list[bytes], vocab: Vocabulary) -> None:
    """Raise ModelLoadError if a text token's bytes differ between the GGUF file and the tokenizer."""
    if len(gguf_bytes) != vocab.size:
        raise ModelLoadError(f"the GGUF vocabulary has {len(gguf_bytes)} tokens, the tokenizer {vocab.size}")
    differ = [i for i, b in enumerate(vocab.token_bytes) if b is not None and b != gguf_bytes[i]]
    if differ:
        shown = ", ".join(f"{i}: {vocab.token_bytes[i]!r} vs {gguf_bytes[i]!r}" for i in differ[:5])
        raise ModelLoadError(f"{len(differ)} tokens differ between the tokenizer and the GGUF file ({shown})")


def gguf_vocabulary(pieces: list[bytes], tokenizer: Any) -> Vocabulary:
    """The tokenizer's vocabulary, checked token by token against the GGUF file's `pieces`
    (`LlamaContext.token_pieces`). Tokens the file holds no text for (Qwen's padding rows past its 151,665
    tokens, named `[PAD151665]`… by the tokenizer) are never allowed; every other text token must have the same
    bytes in both."""
    vocab = Vocabulary.from_hf(tokenizer, vocab_size=len(pieces))
    if len(pieces) == vocab.size:
        text = [None if piece == b"" else b for b, piece in zip(vocab.token_bytes, pieces, strict=True)]
        vocab = Vocabulary(text, vocab.eos_ids, vocab.special_ids, vocab.tokenizer)
    check_vocabulary(pieces, vocab)
    return vocab


def gguf_tokenizer(path: Path) -> Any:
    """The GGUF file's tokenizer: built from its metadata with `tokenizers` (tooldec.backends.gguf_tokenizer:
    ~1 s for Qwen2.5's 151,936 tokens, no cache needed) where the file's tokenizer is one built there exactly
    (byte-level BPE with Qwen2's or Llama 3's pre-tokenizer); any other read by transformers once and kept
    under the tooldec cache (`tokenizers/`).

    transformers reads a GGUF tokenizer by parsing the file's metadata with the `gguf` package in Python (~30 s
    for Qwen2.5 at load 7); its saved files load in about a second. Written to a temporary folder, then renamed;
    the vocabulary is checked against the GGUF file on every load anyway.
    """
    import transformers

    fast = fast_tokenizer(path)
    if fast is not None:
        return fast
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


def available() -> bool:
    """Whether the llama.cpp backend can load here (xllamacpp installed and its library as declared)."""
    from tooldec.backends.llama_api import LlamaApi

    try:
        LlamaApi.load()
    except LlamaApiError:
        return False
    return True


def load_llamacpp(
    name_or_path: str | Path,
    *,
    threads: int | None = None,
    n_ctx: int = 4096,
    sequences: int = 1,
    progress: bool = False,
    tokenizer: Any = None,
    kv_split: bool = False,
) -> LoadedModel:
    """Load a GGUF file (or an embedded model's) into llama.cpp, with its tokenizer (`tokenizer`, or read from
    the file) and a vocabulary checked against the file's. `sequences` rows decode together (the server's
    batch); they share `n_ctx` KV cells, a prefix they start with counted once, or with `kv_split` each has
    `n_ctx / sequences` of its own: a row's attention then reads its own cells only, which is faster when the
    rows' prompts differ (SmolLM2 on 1 thread, 16 rows of distinct 900-token prompts: 16 ms a token against 27;
    a 500-token prefill beside them 3.0 s against 5.5), slower when they share most of it (32 rows of one
    prompt: 16 ms a token against 13)."""
    try:
        import transformers  # noqa: F401 - the tokenizer's; checked here to name the extra to install
    except ImportError as exc:
        raise ModelLoadError(f"the llama.cpp backend needs: pip install 'tooldec[models]' ({exc})") from exc
    start = time.perf_counter()
    spec = str(name_or_path)
    if spec in EMBEDDED_MODELS:
        path, source = fetch_model(spec, progress=progress), f"embedded:{spec}"
    else:
        path, source = Path(spec).expanduser(), f"gguf:{spec}"
        if path.suffix != ".gguf" or not path.is_file():
            raise ModelLoadError(f"the llama.cpp backend takes a .gguf file or an embedded name, not {spec!r}")
    cores = threads or idle_cores()
    torch.set_num_threads(cores)  # torch only masks and samples a logits row here; its default of every core
    # made one isfinite over Qwen's 151,936 logits take 22 ms at load 7 on 2 cores (threads waiting on each other)
    with Stages(enabled=progress).stage("load", f"{path.name} (llama.cpp, quantised)"), quiet_libraries():
        try:
            context = LlamaContext(path, n_ctx=n_ctx, sequences=sequences, threads=cores, unified=not kv_split)
        except LlamaApiError as exc:
            raise ModelLoadError(str(exc)) from exc
        tokenizer = tokenizer if tokenizer is not None else gguf_tokenizer(path)
        vocab = gguf_vocabulary(context.token_pieces(), tokenizer)
    name = spec if spec in EMBEDDED_MODELS else path.name
    return LoadedModel(
        LlamaCppModel(context), tokenizer, vocab, name, source, time.perf_counter() - start, "llamacpp"
    )
