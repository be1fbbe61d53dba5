"""llama.cpp's C API, loaded with ctypes from the extension module of the `xllamacpp` wheel.

xllamacpp (Xorbits, MIT) ships llama.cpp prebuilt for CPUs (manylinux2014, one 34 MB wheel, no compiler needed);
its extension module exports llama.cpp's C API (`llama_decode`, `llama_get_logits`, ...) beside its own Python
API, which is llama.cpp's server and has no per-token hook. tooldec opens that module's shared library with
ctypes, without importing the package, and declares the few functions and structs it calls as they are in the
`llama.h` of the pinned release (XLLAMACPP_VERSION; that fork of llama.cpp has fields upstream lacks, e.g.
`load_mode`, `n_outputs_max_per_seq`).

A struct passed or returned by value that is laid out differently than declared would corrupt memory, so
`LlamaApi.load` checks before first use: every symbol present, and the default parameter structs and a
`llama_batch_get_one` batch read back with the values this header's source gives them at the offsets declared
here. The structs are declared with spare bytes after them, so that a library whose struct grew can neither
write past the buffer nor read garbage. Any mismatch raises LlamaApiError naming the fix (install the pinned
release), never a crash; so does a CPU without the instructions the wheel was compiled for (AVX2, FMA, F16C,
BMI2), checked before the library is opened.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
from collections import deque
from pathlib import Path
from typing import Any

from tooldec.errors import ToolDecError

XLLAMACPP_VERSION = "2026.10.11549"
"""The xllamacpp release whose llama.h the declarations below follow (pinned in pyproject.toml)."""
INSTALL = f'pip install "xllamacpp=={XLLAMACPP_VERSION}"'

_SPARE = 256
"""Bytes after each by-value struct: room for fields a newer library appends (they keep its defaults)."""


class LlamaApiError(ToolDecError):
    """llama.cpp's library is missing, or not the one tooldec's declarations were written for."""


class ModelParams(ctypes.Structure):
    """`struct llama_model_params` (llama.h of XLLAMACPP_VERSION), then spare bytes."""

    _fields_ = [
        ("devices", ctypes.c_void_p),
        ("tensor_buft_overrides", ctypes.c_void_p),
        ("n_gpu_layers", ctypes.c_int32),
        ("split_mode", ctypes.c_int),
        ("load_mode", ctypes.c_int),
        ("lazy_mode", ctypes.c_int),
        ("main_gpu", ctypes.c_int32),
        ("tensor_split", ctypes.c_void_p),
        ("progress_callback", ctypes.c_void_p),
        ("progress_callback_user_data", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
        ("vocab_only", ctypes.c_bool),
        ("check_tensors", ctypes.c_bool),
        ("use_extra_bufts", ctypes.c_bool),
        ("no_host", ctypes.c_bool),
        ("no_alloc", ctypes.c_bool),
        ("load_mtp", ctypes.c_bool),
        ("_spare", ctypes.c_uint8 * _SPARE),
    ]


class ContextParams(ctypes.Structure):
    """`struct llama_context_params` (llama.h of XLLAMACPP_VERSION), then spare bytes."""

    _fields_ = [
        ("n_ctx", ctypes.c_uint32),
        ("n_batch", ctypes.c_uint32),
        ("n_ubatch", ctypes.c_uint32),
        ("n_seq_max", ctypes.c_uint32),
        ("n_rs_seq", ctypes.c_uint32),
        ("n_outputs_max", ctypes.c_uint32),
        ("n_outputs_max_per_seq", ctypes.c_uint32),
        ("n_threads", ctypes.c_int32),
        ("n_threads_batch", ctypes.c_int32),
        ("ctx_type", ctypes.c_int),
        ("rope_scaling_type", ctypes.c_int),
        ("pooling_type", ctypes.c_int),
        ("attention_type", ctypes.c_int),
        ("flash_attn_type", ctypes.c_int),
        ("rope_freq_base", ctypes.c_float),
        ("rope_freq_scale", ctypes.c_float),
        ("yarn_ext_factor", ctypes.c_float),
        ("yarn_attn_factor", ctypes.c_float),
        ("yarn_beta_fast", ctypes.c_float),
        ("yarn_beta_slow", ctypes.c_float),
        ("yarn_orig_ctx", ctypes.c_uint32),
        ("defrag_thold", ctypes.c_float),
        ("cb_eval", ctypes.c_void_p),
        ("cb_eval_user_data", ctypes.c_void_p),
        ("type_k", ctypes.c_int),
        ("type_v", ctypes.c_int),
        ("moe_cache_size", ctypes.c_size_t),
        ("abort_callback", ctypes.c_void_p),
        ("abort_callback_data", ctypes.c_void_p),
        ("embeddings", ctypes.c_bool),
        ("offload_kqv", ctypes.c_bool),
        ("no_perf", ctypes.c_bool),
        ("op_offload", ctypes.c_bool),
        ("swa_full", ctypes.c_bool),
        ("kv_unified", ctypes.c_bool),
        ("samplers", ctypes.c_void_p),
        ("n_samplers", ctypes.c_size_t),
        ("ctx_other", ctypes.c_void_p),
        ("_spare", ctypes.c_uint8 * _SPARE),
    ]


class Batch(ctypes.Structure):
    """`struct llama_batch`: per-token arrays the caller owns (tooldec fills numpy arrays and points here)."""

    _fields_ = [
        ("n_tokens", ctypes.c_int32),
        ("token", ctypes.c_void_p),
        ("embd", ctypes.c_void_p),
        ("pos", ctypes.c_void_p),
        ("n_seq_id", ctypes.c_void_p),
        ("seq_id", ctypes.c_void_p),
        ("logits", ctypes.c_void_p),
    ]


class _BatchOut(ctypes.Structure):
    """A returned `llama_batch`, with spare bytes (the check of the batch layout reads one back)."""

    _fields_ = [("batch", Batch), ("_spare", ctypes.c_uint8 * _SPARE)]


_P, _I32, _U32, _SZ, _B = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_bool
_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "llama_version": (ctypes.c_char_p, []),
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [_LOG_CALLBACK, _P]),
    "llama_model_default_params": (ModelParams, []),
    "llama_context_default_params": (ContextParams, []),
    "llama_model_load_from_file": (_P, [ctypes.c_char_p, ModelParams]),
    "llama_model_free": (None, [_P]),
    "llama_init_from_model": (_P, [_P, ContextParams]),
    "llama_free": (None, [_P]),
    "llama_model_get_vocab": (_P, [_P]),
    "llama_vocab_n_tokens": (_I32, [_P]),
    "llama_vocab_is_eog": (_B, [_P, _I32]),
    "llama_token_to_piece": (_I32, [_P, _I32, ctypes.c_char_p, _I32, _I32, _B]),
    "llama_tokenize": (_I32, [_P, ctypes.c_char_p, _I32, _P, _I32, _B, _B]),
    "llama_n_ctx": (_U32, [_P]),
    "llama_n_batch": (_U32, [_P]),
    "llama_n_seq_max": (_U32, [_P]),
    "llama_batch_get_one": (_BatchOut, [_P, _I32]),
    "llama_decode": (_I32, [_P, Batch]),
    "llama_get_logits": (_P, [_P]),
    "llama_get_logits_ith": (_P, [_P, _I32]),
    "llama_get_memory": (_P, [_P]),
    "llama_memory_clear": (None, [_P, _B]),
    "llama_memory_seq_rm": (_B, [_P, _I32, _I32, _I32]),
    "llama_memory_seq_cp": (None, [_P, _I32, _I32, _I32, _I32]),
    "llama_memory_seq_pos_max": (_I32, [_P, _I32]),
    "llama_set_n_threads": (None, [_P, _I32, _I32]),
    "llama_state_seq_get_size": (_SZ, [_P, _I32]),
    "llama_state_seq_get_data": (_SZ, [_P, _P, _SZ, _I32]),
    "llama_state_seq_set_data": (_SZ, [_P, _P, _SZ, _I32]),
}

_MODEL_DEFAULTS = {
    "devices": None, "n_gpu_layers": -1, "split_mode": 1, "load_mode": -1, "lazy_mode": 1, "main_gpu": 0,
    "vocab_only": False, "check_tensors": False, "use_extra_bufts": True, "no_host": False, "no_alloc": False,
    "load_mtp": False,
}  # fmt: skip
_CONTEXT_DEFAULTS = {
    "n_ctx": 512, "n_batch": 2048, "n_ubatch": 512, "n_seq_max": 1, "n_rs_seq": 0, "n_outputs_max": 0,
    "n_outputs_max_per_seq": 1, "ctx_type": 0, "rope_scaling_type": -1, "pooling_type": -1, "attention_type": -1,
    "flash_attn_type": -1, "rope_freq_base": 0.0, "yarn_ext_factor": -1.0, "yarn_orig_ctx": 0,
    "defrag_thold": -1.0, "cb_eval": None, "type_k": 1, "type_v": 1, "moe_cache_size": 0, "abort_callback": None,
    "embeddings": False, "offload_kqv": True, "no_perf": True, "op_offload": True, "swa_full": True,
    "kv_unified": False, "samplers": None, "n_samplers": 0, "ctx_other": None,
}  # fmt: skip
"""The defaults llama-model.cpp / llama-context.cpp of XLLAMACPP_VERSION give: read back at these offsets, they
show the layout matches."""


def library_path() -> Path:
    """The shared library of xllamacpp's extension module, found without importing the package."""
    spec = importlib.util.find_spec("xllamacpp")
    if spec is None or not spec.submodule_search_locations:
        raise LlamaApiError(f"llama.cpp is not installed: {INSTALL} (or pip install 'tooldec[models]')")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("xllamacpp*.so"))
        if found:
            return found[0]
    raise LlamaApiError(f"the xllamacpp package holds no extension module: {INSTALL} --force-reinstall")


CPU_FEATURES = ("avx", "avx2", "fma", "f16c", "bmi2")
"""What the wheel's llama.cpp was compiled for (`llama_print_system_info`): on a CPU without them loading it would
stop the process with an illegal instruction."""


def missing_cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The CPU_FEATURES this machine lacks, read from `cpuinfo` (none where that file is absent or unreadable)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return [] if flags is None else [f for f in CPU_FEATURES if f not in flags]


def installed_version() -> str | None:
    """The installed xllamacpp's version (None if its metadata is missing)."""
    try:
        return importlib.metadata.version("xllamacpp")
    except importlib.metadata.PackageNotFoundError:
        return None


class LlamaApi:
    """The loaded library with the functions tooldec calls declared, checked once (`load`)."""

    _loaded: LlamaApi | None = None

    def __init__(self, path: Path) -> None:
        """Open `path` and declare every function; raises LlamaApiError for a missing symbol or bad layout."""
        self.path = path
        self.version = installed_version()
        missing_features = missing_cpu_features()
        if missing_features:
            raise LlamaApiError(
                f"this CPU lacks {', '.join(missing_features)}, which xllamacpp's llama.cpp needs: use "
                "--backend transformers"
            )
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise LlamaApiError(f"cannot load llama.cpp from {path}: {exc}; {INSTALL} --force-reinstall") from exc
        missing = [name for name in _SIGNATURES if not hasattr(self.lib, name)]
        if missing:
            raise LlamaApiError(
                f"xllamacpp {self.version} lacks llama.cpp functions tooldec calls ({', '.join(missing)}): "
                f"{INSTALL}"
            )
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(self.lib, name)
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name, function)
        self._check_layout()
        self.errors: deque[str] = deque(maxlen=20)
        self._log = _LOG_CALLBACK(self._on_log)  # kept: llama.cpp calls it for the life of the process
        self.lib.llama_log_set(self._log, None)
        self.lib.llama_backend_init()

    @classmethod
    def load(cls) -> LlamaApi:
        """The process's one checked instance (loaded on first call)."""
        if cls._loaded is None:
            cls._loaded = cls(library_path())
        return cls._loaded

    def _check_layout(self) -> None:
        """Raise LlamaApiError unless the structs read back as this header's source defines them."""
        wrong = []
        model = self.lib.llama_model_default_params()
        context = self.lib.llama_context_default_params()
        for struct, defaults in ((model, _MODEL_DEFAULTS), (context, _CONTEXT_DEFAULTS)):
            for name, want in defaults.items():
                got = getattr(struct, name)
                if got != want:
                    wrong.append(f"{type(struct).__name__}.{name} = {got!r}, not {want!r}")
        tokens = (ctypes.c_int32 * 3)(1, 2, 3)
        one = self.lib.llama_batch_get_one(ctypes.cast(tokens, ctypes.c_void_p), 3).batch
        if (one.n_tokens, one.token) != (3, ctypes.addressof(tokens)) or any(
            (one.embd, one.pos, one.n_seq_id, one.seq_id, one.logits)
        ):
            wrong.append("llama_batch fields")
        if wrong:
            raise LlamaApiError(
                f"the llama.cpp in xllamacpp {self.version} is laid out differently than tooldec declares "
                f"({'; '.join(wrong[:4])}): {INSTALL}"
            )

    def _on_log(self, level: int, text: bytes | None, _user: Any) -> None:
        """Keep llama.cpp's warnings and errors (for error messages); print nothing."""
        if level in (3, 4) and text:
            self.errors.append(text.decode("utf-8", "replace").strip())

    def last_errors(self) -> str:
        """llama.cpp's recent warnings and errors, joined (empty if none), and forget them."""
        text = "; ".join(e for e in self.errors if e)
        self.errors.clear()
        return text

    def __getattr__(self, name: str) -> Any:
        """Functions are set per instance in __init__; this only tells mypy they exist."""
        raise AttributeError(name)
