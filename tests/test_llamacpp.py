"""The llama.cpp backend (tier: runs where llama-cpp-python is installed; fetches the embedded SmolLM2 GGUF).

The same property as the transformers backend's: under random sampling every finished call is valid, in every
call format; and the vocabulary read from the GGUF file matches the tokenizer's.
"""

from __future__ import annotations

import jsonschema
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("transformers")

from tooldec.backends.llamacpp import check_vocabulary, gguf_token_bytes, load_llamacpp
from tooldec.backends.loader import LoadedModel, ModelLoadError
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import Decoder
from tooldec.errors import ToolDecError
from tooldec.grammar.calls import FORMATS
from tooldec.specs import ToolSet, ToolSpec
from tooldec.toolsets import funcqa_tools

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        "required": ["city"],
    },
)
TOOLS = ToolSet([*funcqa_tools(), WEATHER])


def check_call(call) -> None:  # type: ignore[no-untyped-def]
    """The call names a tool and its arguments validate against that tool's schema."""
    assert call.name in TOOLS
    tool = TOOLS[call.name]
    jsonschema.validate(call.bind(tool), tool.parameters)


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    try:
        return load_llamacpp("smollm2", threads=1, n_ctx=2048)
    except (ToolDecError, OSError) as exc:
        pytest.skip(f"the embedded SmolLM2 cannot be fetched here: {exc}")


def test_gguf_vocabulary_matches_the_tokenizer(lm: LoadedModel) -> None:
    gguf = gguf_token_bytes(lm.model.llama)
    check_vocabulary(gguf, lm.vocab)
    assert sum(b is not None for b in lm.vocab.token_bytes) > 49_000
    wrong = list(gguf)
    wrong[300] = wrong[300] + b"!"
    with pytest.raises(ModelLoadError, match="1 tokens differ"):
        check_vocabulary(wrong, lm.vocab)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sampled_calls_are_always_valid(lm: LoadedModel, fmt: str) -> None:
    grammar = lm.compiler.compile(TOOLS, fmt)
    decoder = Decoder(lm.model, lm.vocab)
    prompt = lm.tokenizer.encode(
        "Call one of the tools, for example get_weather, to answer: weather in Oslo?\n"
    )
    for seed in range(3):
        gen = decoder.generate(
            [prompt],
            [CallController(grammar)],
            SamplingParams(temperature=1.0, seed=seed),
            max_new_tokens=300,
        )[0]
        assert gen.finish_reason == "stop", gen.text
        assert len(gen.events) == 1 and gen.events[0].error is None
        for call in gen.events[0].calls:
            check_call(call)


def test_sequences_restart_and_continue(lm: LoadedModel) -> None:
    """A new generation resets llama.cpp's context: greedy decoding twice gives the same tokens."""
    grammar = lm.compiler.compile(TOOLS, "json")
    prompt = lm.tokenizer.encode("Weather in Paris as a tool call:\n")
    runs = [
        Decoder(lm.model, lm.vocab)
        .generate([prompt], [CallController(grammar)], max_new_tokens=120)[0]
        .tokens
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and runs[0]


def test_tokens_without_text_in_the_gguf_file_are_never_allowed(lm: LoadedModel, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Qwen's padding rows: the tokenizer names them `[PAD151665]`, the GGUF file holds no text for them."""
    import tooldec.backends.llamacpp as backend

    pieces = backend.gguf_token_bytes(lm.model.llama)
    pieces[400] = b""
    monkeypatch.setattr(backend, "gguf_token_bytes", lambda llama: pieces)
    vocab = backend.gguf_vocabulary(lm.model.llama, lm.tokenizer)
    assert vocab.token_bytes[400] is None and lm.vocab.token_bytes[400]
    assert vocab.token_bytes[401] == lm.vocab.token_bytes[401]
