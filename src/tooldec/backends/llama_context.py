"""One llama.cpp model and context with several sequences, through llama.cpp's C API (tooldec.backends.llama_api).

`LlamaContext.decode` runs any number of sequences' new tokens in one `llama_decode` (several when they exceed
the context's batch size: every token but each row's last first, then the last ones together) and returns the
logits of each row's last token as a numpy view of llama.cpp's own output buffer: masking them in place (the
compiled core's kernel) and sampling need no copy. The KV cache is unified: a sequence copied from another
(`copy`) shares its cells rather than duplicating them, so rows that start from one prompt prefix keep it once.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tooldec.backends.llama_api import Batch, LlamaApi
from tooldec.backends.loader import ModelLoadError


class LlamaContext:
    """A GGUF model loaded by llama.cpp (quantised as it is) with one context of `sequences` sequences."""

    def __init__(
        self, path: Path, *, n_ctx: int = 4096, sequences: int = 1, threads: int = 1, n_batch: int = 512,
        unified: bool = True,
    ) -> None:
        """Load `path` and make a context of `n_ctx` cells for `sequences` sequences: shared by all (`unified`),
        or `n_ctx / sequences` cells each, so that a sequence's attention reads its own cells only; raises
        ModelLoadError if llama.cpp refuses the file or the settings (with its own message)."""
        self.model: int | None = None
        self.ctx: int | None = None
        self.api = api = LlamaApi.load()
        self.path = path
        model_params = api.llama_model_default_params()
        self.model = api.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise ModelLoadError(f"llama.cpp cannot load {path}: {api.last_errors() or 'no reason given'}")
        params = api.llama_context_default_params()
        if not unified:  # each sequence's own cells, a multiple of llama.cpp's padding (256)
            n_ctx = sequences * max(256, n_ctx // sequences // 256 * 256)
        params.n_ctx, params.n_seq_max = n_ctx, sequences
        params.n_batch = params.n_ubatch = n_batch
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = self.unified = unified
        self.ctx = api.llama_init_from_model(self.model, params)
        if not self.ctx:
            self.close()
            raise ModelLoadError(f"llama.cpp cannot make a context for {path}: {api.last_errors()}")
        self.settings = (n_ctx, sequences, n_batch, params.type_k, params.type_v, params.flash_attn_type, unified)
        """What shapes a sequence's stored state (for the prefix store's key)."""
        self.vocab = api.llama_model_get_vocab(self.model)
        self.n_vocab = api.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = api.llama_n_ctx(self.ctx)
        self.sequences = api.llama_n_seq_max(self.ctx)
        self.n_batch = api.llama_n_batch(self.ctx)
        self.memory = api.llama_get_memory(self.ctx)
        size = self.n_batch
        self._tokens = np.zeros(size, dtype=np.int32)
        self._pos = np.zeros(size, dtype=np.int32)
        self._n_seq = np.ones(size, dtype=np.int32)
        self._seq = np.zeros(size, dtype=np.int32)
        self._seq_ptrs = (self._seq.ctypes.data + 4 * np.arange(size)).astype(np.uint64)
        self._outputs = np.zeros(size, dtype=np.int8)

    def close(self) -> None:
        """Free the context and the model (the object is unusable after)."""
        if self.ctx:
            self.api.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.api.llama_model_free(self.model)
            self.model = None

    def __del__(self) -> None:
        """Free llama.cpp's memory with the object."""
        if getattr(self, "api", None) is not None and hasattr(self, "ctx"):
            self.close()

    def set_threads(self, threads: int) -> None:
        """Threads for the next decodes (single tokens and prompts alike)."""
        self.api.llama_set_n_threads(self.ctx, threads, threads)

    def decode(self, rows: Sequence[tuple[int, int, Sequence[int]]]) -> np.ndarray:
        """Run every row's new tokens, `(sequence, position of the first, tokens)`, each row with at least one,
        and return the logits after each row's last token: a `float32[len(rows), V]` view of llama.cpp's buffer,
        valid until the next decode. Raises ModelLoadError if llama.cpp refuses the batch (context full,
        a sequence or position out of range)."""
        if not rows or any(not tokens for _, _, tokens in rows):
            raise ValueError("every row needs at least one new token")
        if len(rows) > self.n_batch:
            raise ValueError(f"{len(rows)} rows, more than the batch size {self.n_batch}")
        for seq, _, _ in rows:
            if not 0 <= seq < self.sequences:
                raise ValueError(f"sequence {seq} outside the context's {self.sequences}")
        if sum(len(t) for _, _, t in rows) > self.n_batch:
            self._run([(s, p, t[:-1]) for s, p, t in rows if len(t) > 1], outputs=False)
            rows = [(s, p + len(t) - 1, t[-1:]) for s, p, t in rows]
        self._run(rows, outputs=True)
        pointer = self.api.llama_get_logits(self.ctx)
        if not pointer:
            raise ModelLoadError(f"llama.cpp returned no logits: {self.api.last_errors()}")
        array = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(array, shape=(len(rows), self.n_vocab))

    def _run(self, rows: Sequence[tuple[int, int, Sequence[int]]], *, outputs: bool) -> None:
        """Decode the rows in batches of at most n_batch tokens; with `outputs`, the rows' last tokens output
        (then they fit one batch)."""
        n = 0
        for seq, start, tokens in rows:
            for i, token in enumerate(tokens):
                if n == self.n_batch:
                    self._submit(n)
                    n = 0
                self._tokens[n], self._pos[n], self._seq[n] = token, start + i, seq
                self._outputs[n] = outputs and i == len(tokens) - 1
                n += 1
        if n:
            self._submit(n)

    def _submit(self, n: int) -> None:
        """One llama_decode of the first `n` prepared tokens."""
        batch = Batch(
            n,
            self._tokens.ctypes.data,
            None,
            self._pos.ctypes.data,
            self._n_seq.ctypes.data,
            self._seq_ptrs.ctypes.data,
            self._outputs.ctypes.data,
        )
        code = self.api.llama_decode(self.ctx, batch)
        if code != 0:
            reason = {1: "the context is full", 2: "aborted"}.get(code, "invalid batch")
            raise ModelLoadError(f"llama_decode failed ({code}: {reason}): {self.api.last_errors()}")

    def clear(self) -> None:
        """Forget every sequence."""
        self.api.llama_memory_clear(self.memory, True)

    def drop(self, seq: int, start: int = 0) -> None:
        """Forget sequence `seq`'s positions from `start` on."""
        self.api.llama_memory_seq_rm(self.memory, seq, start, -1)

    def copy(self, source: int, target: int, length: int) -> None:
        """Make `target`'s first `length` positions those of `source`: shared cells in a unified context; else a
        copy of `source`'s whole stream (llama.cpp copies no less across streams) cut after `length`."""
        self.api.llama_memory_seq_rm(self.memory, target, 0, -1)
        if self.unified:
            self.api.llama_memory_seq_cp(self.memory, source, target, 0, length)
        else:
            self.api.llama_memory_seq_cp(self.memory, source, target, -1, -1)
            self.api.llama_memory_seq_rm(self.memory, target, length, -1)

    def last_position(self, seq: int) -> int:
        """The largest position sequence `seq` holds (-1 when empty)."""
        return int(self.api.llama_memory_seq_pos_max(self.memory, seq))

    def state(self, seq: int) -> bytes:
        """Sequence `seq`'s state (its KV cells) as llama.cpp writes it."""
        size = self.api.llama_state_seq_get_size(self.ctx, seq)
        buffer = (ctypes.c_uint8 * size)()
        written = self.api.llama_state_seq_get_data(self.ctx, buffer, size, seq)
        if written != size:
            raise ModelLoadError(f"llama.cpp wrote {written} of {size} bytes of sequence state")
        return bytes(buffer)

    def set_state(self, seq: int, state: bytes) -> None:
        """Put a `state` back as sequence `seq`; raises ModelLoadError if llama.cpp refuses it."""
        self.drop(seq)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if self.api.llama_state_seq_set_data(self.ctx, buffer, len(state), seq) != len(state):
            self.drop(seq)
            raise ModelLoadError(f"llama.cpp refused the stored sequence state: {self.api.last_errors()}")

    def token_pieces(self) -> list[bytes]:
        """Every token's bytes as llama.cpp reads them from the GGUF file (special tokens as their text)."""
        size = 256
        buffer = ctypes.create_string_buffer(size)
        pieces = []
        for token in range(self.n_vocab):
            n = self.api.llama_token_to_piece(self.vocab, token, buffer, size, 0, True)
            if n < 0:
                raise ModelLoadError(f"token {token} of the GGUF vocabulary is longer than {size} bytes")
            pieces.append(buffer.raw[:n])
        return pieces
