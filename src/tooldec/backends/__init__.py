"""Model backends: load a causal LM and its tokenizer from a folder, a hub id, a GGUF file or an embedded model."""

from tooldec.backends.embedded import DEFAULT_MODEL, EMBEDDED_MODELS, SMALL_MODEL, fetch_model
from tooldec.backends.loader import LoadedModel, load_model

__all__ = ["DEFAULT_MODEL", "EMBEDDED_MODELS", "SMALL_MODEL", "LoadedModel", "fetch_model", "load_model"]
