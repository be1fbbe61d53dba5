"""The GGUF tokenizer built from the file's metadata (tooldec.backends.gguf_tokenizer) equals transformers' own.

Small GGUF files written here (tests/gguf_fixture.py, no download): a byte-level BPE trained on the spot, with
CONTROL and USER_DEFINED tokens, padding rows, a token spelled outside the byte alphabet and a CONTROL token
llama.cpp mislabels, under Qwen2's and Llama 3's pre-tokenizers. On each, the fast tokenizer encodes and decodes
every string hypothesis draws as `AutoTokenizer.from_pretrained(dir, gguf_file=...)` does, with and without
special tokens, renders the chat template the same and gives the same tooldec Vocabulary. A file whose tokenizer
is not built exactly here falls back to transformers' path (and its cache). The reader reads every key as the
`gguf` package does. The slow tier compares the embedded Qwen2.5-Coder's own file where it is fetched already
(benchmarks/gguf_tokenizer_check.py does on thousands of texts, and against llama.cpp's own tokenizer).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip(
        "the fast GGUF tokenizer is built for transformers 5 (older ones take their own path)",
        allow_module_level=True,
    )

from gguf_fixture import write_tokenizer_gguf
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from tooldec.backends import gguf_tokenizer as fast_module
from tooldec.backends.gguf_tokenizer import GgufFormatError, fast_tokenizer, read_metadata, unsupported
from tooldec.vocab import Vocabulary

NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
CONTROLS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_pad|>"]
USERS = ["<tool_call>", "</tool_call>", "<think>"]
# a CONTROL token spelled outside the byte alphabet: transformers skips it
MISLABELLED = "<｜end▁of▁sentence｜>"
RAW = "raw token"  # a NORMAL token written with a real space: transformers respells it byte by byte
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "I'm sure it's what we'd call a test, isn't it? They'll say WE'RE done; you've seen it.",
    "def add(a, b):\n    return a + b  # 12345 + 67890 = 80235\r\n\r\n\n\t\tx = [1, 22, 333]",
    '{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}',
    "Grüße aus Köln, 東京 und Москва — naïve café, ﬁ ligatures, e\u0301 combining, 🙂👍🏽 emoji.",
    "   leading spaces, trailing spaces   \n\n  and  double  spaces\u00a0nbsp",
]


def _tokens_and_merges() -> tuple[list[str], list[str]]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS * 30, trainer)
    import json

    model = json.loads(tok.to_str())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


def _write(
    path: Path, *, architecture: str, pre: str | None, add_bos: bool | None, model: str = "gpt2"
) -> Path:
    tokens, merges = _tokens_and_merges()
    types = [NORMAL] * len(tokens)
    extra = [(RAW, NORMAL)] + [(t, CONTROL) for t in CONTROLS] + [(t, USER_DEFINED) for t in USERS]
    extra += [(MISLABELLED, CONTROL)] + [
        (f"[PAD{len(tokens) + len(extra) + i + 1}]", UNUSED) for i in range(3)
    ]
    tokens += [t for t, _ in extra]
    types += [k for _, k in extra]
    ids = {t: i for i, t in enumerate(tokens)}
    return write_tokenizer_gguf(
        path, tokens, merges, architecture=architecture, model=model, pre=pre, token_types=types,
        bos=ids["<|endoftext|>"], eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"], add_bos=add_bos,
        chat_template=TEMPLATE,
    )  # fmt: skip


FILES = {  # name: (architecture, pre-tokenizer, add_bos)
    "qwen2": ("qwen2", "qwen2", False),
    "llama3": ("llama", "llama-bpe", True),
}


@pytest.fixture(scope="module", params=sorted(FILES))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    """(the fast tokenizer, transformers' GGUF tokenizer, the file) for each supported kind of file."""
    architecture, pre, add_bos = FILES[request.param]
    path = _write(
        tmp_path_factory.mktemp("gguf") / f"{request.param}.gguf",
        architecture=architecture,
        pre=pre,
        add_bos=add_bos,
    )
    fast = fast_tokenizer(path)
    assert fast is not None
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return fast, reference, path


_PIECES = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=12),
    st.text(st.sampled_from("aZ09 '\t\r\n_-.,:;!?{}[]\"\\/éü東🙂\u0301\u00a0"), max_size=16),
    st.sampled_from(
        [*CONTROLS, *USERS, MISLABELLED, RAW, "'s", "'LL", "'Re", "\r\n", "  \n", "1234567", "[PAD1]"]
    ),
)
TEXTS = st.lists(_PIECES, max_size=8).map("".join)


@given(text=TEXTS)
def test_encode_and_decode_equal_transformers(pair: tuple[Any, Any, Path], text: str) -> None:
    fast, reference, _ = pair
    for special in (False, True):
        ids = fast.encode(text, add_special_tokens=special)
        assert ids == reference.encode(text, add_special_tokens=special), (text, special)
        assert fast.convert_ids_to_tokens(ids) == reference.convert_ids_to_tokens(ids)
        for skip in (False, True):
            assert fast.decode(ids, skip_special_tokens=skip) == reference.decode(
                ids, skip_special_tokens=skip
            )


@given(data=st.data())
def test_any_ids_decode_equal_transformers(pair: tuple[Any, Any, Path], data: st.DataObject) -> None:
    fast, reference, _ = pair
    ids = data.draw(st.lists(st.integers(0, len(reference) - 1), max_size=12))
    for skip in (False, True):
        assert fast.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_special_tokens_template_and_vocabulary_equal_transformers(pair: tuple[Any, Any, Path]) -> None:
    fast, reference, _ = pair
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "bos_token_id", "eos_token_id",
                 "pad_token_id", "all_special_tokens", "all_special_ids", "chat_template", "add_bos_token",
                 "add_eos_token"):  # fmt: skip
        assert getattr(fast, name) == getattr(reference, name), name
    assert len(fast) == len(reference)
    assert fast.get_vocab() == reference.get_vocab()
    assert {i: (t.content, t.special) for i, t in fast.added_tokens_decoder.items()} == {
        i: (t.content, t.special) for i, t in reference.added_tokens_decoder.items()
    }
    # left out as transformers leaves it, respelled in the vocab
    assert MISLABELLED not in fast.get_added_vocab()
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What's 3.14 × 123?"},
    ]
    rendered = fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert fast.encode(rendered, add_special_tokens=False) == reference.encode(
        rendered, add_special_tokens=False
    )
    ours, theirs = Vocabulary.from_hf(fast), Vocabulary.from_hf(reference)
    assert ours.token_bytes == theirs.token_bytes
    assert (ours.eos_ids, ours.special_ids) == (theirs.eos_ids, theirs.special_ids)


def test_the_reader_reads_every_key_as_the_gguf_package(pair: tuple[Any, Any, Path]) -> None:
    path = pair[2]
    ours = read_metadata(path, None)
    reader = gguf.GGUFReader(str(path))
    fields = {name: field for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    assert set(ours) == set(fields)
    for name, field in fields.items():
        theirs = field.contents()
        if isinstance(ours[name], np.ndarray):
            assert ours[name].tolist() == list(theirs), name
        elif isinstance(ours[name], float):
            assert ours[name] == pytest.approx(theirs), name
        else:
            assert ours[name] == theirs, name


def test_gguf_tokenizer_builds_without_transformers_path_or_cache(
    pair: tuple[Any, Any, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from tooldec.backends.llamacpp import gguf_tokenizer

    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("transformers' GGUF path taken for a file built here")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    tokenizer = gguf_tokenizer(pair[2])
    assert tokenizer.encode("What's 3.14 times 123?") == pair[1].encode("What's 3.14 times 123?")
    assert not any((tmp_path / "tokenizers").glob("*/tokenizer.json"))


@pytest.mark.parametrize(
    ("model", "pre", "why"),
    [("gpt2", "smollm", "pre-tokenizer 'smollm'"), ("gpt2", None, "pre-tokenizer None"),
     ("gpt2", "default", "pre-tokenizer 'default'"), ("llama", "default", "tokenizer model 'llama'")],
)  # fmt: skip
def test_a_tokenizer_not_built_here_is_left_to_transformers(
    tmp_path: Path, model: str, pre: str | None, why: str
) -> None:
    path = _write(tmp_path / "other.gguf", architecture="llama", pre=pre, add_bos=False, model=model)
    assert (unsupported(read_metadata(path)) or "").startswith(why)
    assert fast_tokenizer(path) is None


def test_an_unsupported_pre_tokenizer_falls_back_to_transformers_and_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from tooldec.backends.llamacpp import gguf_tokenizer
    from tooldec.backends.loader import gguf_key

    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path / "cache"))
    path = _write(tmp_path / "smol.gguf", architecture="llama", pre="smollm", add_bos=False)
    first = gguf_tokenizer(path)
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    text = "I'm 12345 times <tool_call>here</tool_call><|im_end|>"
    assert first.encode(text) == reference.encode(text)
    folder = tmp_path / "cache" / "tokenizers" / gguf_key(path)
    assert (folder / "tokenizer.json").is_file()
    assert gguf_tokenizer(path).name_or_path == str(folder)


def test_files_the_reader_cannot_read_are_left_to_transformers(
    tmp_path: Path, pair: tuple[Any, Any, Path]
) -> None:
    data = pair[2].read_bytes()
    for name, content in (("magic", b"GGUX" + data[4:]), ("version", data[:4] + b"\x01\x00\x00\x00" + data[8:]),
                          ("short", data[:200]), ("half", data[: len(data) // 2])):  # fmt: skip
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(content)
        with pytest.raises(GgufFormatError):
            read_metadata(path)
        assert fast_tokenizer(path) is None


def test_a_transformers_without_the_unshared_backend_still_wraps(
    pair: tuple[Any, Any, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where transformers would not take a backend set before `__init__`, the backend is handed over (copied)."""
    fast, _, path = pair
    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "_tokenizer", "not None", raising=False)
    copied = fast_module.fast_tokenizer(path)
    monkeypatch.undo()
    assert copied.encode("<|im_start|>user\nI'm 123<|im_end|>") == fast.encode(
        "<|im_start|>user\nI'm 123<|im_end|>"
    )


@pytest.fixture(scope="module")
def qwen() -> tuple[Any, Any]:
    """(fast, transformers') tokenizers of the embedded Qwen2.5-Coder's own file, where it is fetched already."""
    from tooldec.backends.embedded import EMBEDDED_MODELS

    spec = EMBEDDED_MODELS["qwen2.5-coder-0.5b"]
    root = (
        os.environ.get("TOOLDEC_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tooldec"
    )
    path = Path(root) / "models" / spec.name / spec.gguf_name
    if not path.is_file():
        pytest.skip("the embedded Qwen2.5-Coder is not fetched here (tooldec fetch-model qwen2.5-coder-0.5b)")
    fast = fast_tokenizer(path)
    assert fast is not None
    return fast, transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.slow
@settings(max_examples=300)
@given(text=TEXTS)
def test_the_default_models_tokenizer_equals_transformers(qwen: tuple[Any, Any], text: str) -> None:
    """benchmarks/gguf_tokenizer_check.py compares them on thousands of texts; this is its short form."""
    fast, reference = qwen
    ids = fast.encode(text, add_special_tokens=False)
    assert ids == reference.encode(text, add_special_tokens=False)
    assert fast.decode(ids) == reference.decode(ids)
    assert fast.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True)


@pytest.mark.slow
def test_the_default_models_vocabulary_and_template_equal_transformers(qwen: tuple[Any, Any]) -> None:
    fast, reference = qwen
    assert fast.get_vocab() == reference.get_vocab()
    assert fast.chat_template == reference.chat_template
    assert (fast.bos_token, fast.eos_token, fast.pad_token) == (
        reference.bos_token,
        reference.eos_token,
        reference.pad_token,
    )
    ours, theirs = Vocabulary.from_hf(fast), Vocabulary.from_hf(reference)
    assert (ours.token_bytes, ours.eos_ids, ours.special_ids) == (
        theirs.token_bytes,
        theirs.eos_ids,
        theirs.special_ids,
    )
