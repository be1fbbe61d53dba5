"""Tests of tooldec.vocab: token bytes, EOS discovery and exact-bytes encoding on real `tokenizers` tokenizers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from tooldec.errors import VocabularyError
from tooldec.vocab import Vocabulary

SHARED = Path(os.environ.get("TOOLDEC_SHARED", "../shared"))
TOKENIZERS = SHARED / "tokenizers"

JSONISH = st.text(
    alphabet=st.sampled_from(
        list('{}[]":,. -_\n\t0123456789abcdehlnorstuw') + ["é", "ü", "東", "€", "😀", "\x00"]
    ),
    max_size=80,
)
"""Text close to the training corpus, so that multi-byte tokens and merges are exercised."""
ANY_TEXT = st.one_of(st.text(max_size=60), JSONISH)
SAMPLES = [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}\n</tool_call>',
    '{"name": "translate", "arguments": {"text": "東京タワー 🗼", "to": "ελληνικά"}}',
    ' {"id": 12345, "ok": true, "tags": ["a\\"b", "\\u00e9"]}\n',
    "hello world",
]


@pytest.fixture(params=["bytelevel_tokenizer", "sentencepiece_tokenizer"])
def tokenizer(request: pytest.FixtureRequest) -> Tokenizer:
    """Each of the two fixture tokenizers in turn."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def vocab(tokenizer: Tokenizer) -> Vocabulary:
    """The Vocabulary of `tokenizer`."""
    return Vocabulary.from_tokenizers(tokenizer)


def ordinary_ids(tok: Tokenizer) -> list[int]:
    """Ids of the model's own tokens that are not also added tokens."""
    return sorted(set(tok.get_vocab(with_added_tokens=False).values()) - set(tok.get_added_tokens_decoder()))


def test_size_and_special_tokens(tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    assert vocab.size == len(vocab.token_bytes) == tokenizer.get_vocab_size(with_added_tokens=True)
    for name in ("</s>", "<|endoftext|>", "<tool_call>"):
        token_id = tokenizer.token_to_id(name)
        assert vocab.special_ids[name] == token_id
        assert vocab.token_bytes[token_id] is None
    assert vocab.tokenizer is tokenizer


def test_eos_found(tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    assert vocab.eos_ids == {tokenizer.token_to_id("</s>"), tokenizer.token_to_id("<|endoftext|>")}


def test_explicit_eos_tokens(tokenizer: Tokenizer) -> None:
    vocab = Vocabulary.from_tokenizers(tokenizer, eos_tokens=["<tool_call>"])
    assert vocab.eos_ids == {tokenizer.token_to_id("<tool_call>")}
    with pytest.raises(VocabularyError, match="not in the vocabulary"):
        Vocabulary.from_tokenizers(tokenizer, eos_tokens=["<nope>"])


def test_multi_byte_tokens_exist(bytelevel_tokenizer: Tokenizer) -> None:
    tokens = set(Vocabulary.from_tokenizers(bytelevel_tokenizer).token_bytes)
    assert {b'",', b'"}}', b"45"} <= tokens


def test_byte_level_tokens_match_decode(bytelevel_tokenizer: Tokenizer) -> None:
    vocab = Vocabulary.from_tokenizers(bytelevel_tokenizer)
    ids = ordinary_ids(bytelevel_tokenizer)
    assert len(ids) > 300
    for token_id, text in zip(ids, bytelevel_tokenizer.decode_batch([[i] for i in ids]), strict=True):
        if "\ufffd" not in text:  # else the token is part of a UTF-8 sequence and decode() is lossy
            assert vocab.token_bytes[token_id] == text.encode()


def test_sentencepiece_tokens_match_decode(sentencepiece_tokenizer: Tokenizer) -> None:
    vocab = Vocabulary.from_tokenizers(sentencepiece_tokenizer)
    ids = ordinary_ids(sentencepiece_tokenizer)
    texts = sentencepiece_tokenizer.decode_batch([[i] for i in ids])
    for token_id, text in zip(ids, texts, strict=True):
        if "\ufffd" not in text:
            assert (
                vocab.token_bytes[token_id].decode().removeprefix(" ") == text
            )  # Strip drops a leading space
    assert b" " in vocab.token_bytes and b' {"' in vocab.token_bytes


def test_byte_fallback_tokens(sentencepiece_tokenizer: Tokenizer) -> None:
    vocab = Vocabulary.from_tokenizers(sentencepiece_tokenizer)
    assert vocab.token_bytes[sentencepiece_tokenizer.token_to_id("<0x41>")] == b"A"
    assert vocab.token_bytes[sentencepiece_tokenizer.token_to_id("<0xFF>")] == b"\xff"
    assert vocab.token_bytes[sentencepiece_tokenizer.token_to_id("<0x0A>")] == b"\n"


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT)
@example(text="</s>")
def test_encode_round_trips_bytelevel(bytelevel_tokenizer: Tokenizer, text: str) -> None:
    vocab = Vocabulary.from_tokenizers(bytelevel_tokenizer)
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text.encode()
    if not any(name in text for name in vocab.special_ids):  # the tokenizer's own split is kept
        assert ids == bytelevel_tokenizer.encode(text, add_special_tokens=False).ids


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT)
@example(text="▁x <0x41>")
def test_encode_round_trips_sentencepiece(sentencepiece_tokenizer: Tokenizer, text: str) -> None:
    vocab = Vocabulary.from_tokenizers(sentencepiece_tokenizer)
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text.encode()
    assert all(vocab.token_bytes[i] for i in ids)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=40))
def test_encode_bytes_round_trips(
    bytelevel_tokenizer: Tokenizer, sentencepiece_tokenizer: Tokenizer, data: bytes
) -> None:
    for tok in (bytelevel_tokenizer, sentencepiece_tokenizer):
        vocab = Vocabulary.from_tokenizers(tok)
        assert vocab.decode(vocab.encode(data)) == data


def test_sentencepiece_encode_drops_prepended_space(sentencepiece_tokenizer: Tokenizer) -> None:
    vocab = Vocabulary.from_tokenizers(sentencepiece_tokenizer)
    own = sentencepiece_tokenizer.encode(' {"name": 12}', add_special_tokens=False).ids
    assert vocab.encode(' {"name": 12}') == own
    ids = vocab.encode('{"name": 12}')
    assert vocab.decode(ids) == b'{"name": 12}'
    assert (
        ids[len(ids) - len(own) + 1 :] == own[1:]
    )  # only the first token, cut by the prepended `▁`, changes


def test_encode_special_token_text_stays_text(tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    text = '<tool_call>{"a": 1}</s>'
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text.encode()
    assert not set(ids) & set(vocab.special_ids.values())


def test_encode_empty(vocab: Vocabulary) -> None:
    assert vocab.encode("") == [] and vocab.encode(b"") == []


def test_decode_skips_control_tokens_and_checks_range(tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    eos = tokenizer.token_to_id("</s>")
    assert vocab.decode([*vocab.encode("ok"), eos]) == b"ok"
    with pytest.raises(VocabularyError):
        vocab.decode([vocab.size])
    with pytest.raises(VocabularyError):
        vocab.decode([-1])


def test_vocab_size_padding(tokenizer: Tokenizer) -> None:
    base = tokenizer.get_vocab_size(with_added_tokens=True)
    padded = Vocabulary.from_tokenizers(tokenizer, vocab_size=base + 64)
    assert padded.size == len(padded.token_bytes) == base + 64
    assert padded.token_bytes[base:] == [None] * 64
    assert padded.token_bytes[:base] == Vocabulary.from_tokenizers(tokenizer).token_bytes
    with pytest.raises(VocabularyError, match="smaller"):
        Vocabulary.from_tokenizers(tokenizer, vocab_size=base - 1)


def test_non_special_added_token_is_text(bytelevel_tokenizer: Tokenizer) -> None:
    tok = Tokenizer.from_str(bytelevel_tokenizer.to_str())
    tok.add_tokens([AddedToken("<tool_sep>é\n", special=False)])
    vocab = Vocabulary.from_tokenizers(tok)
    token_id = tok.token_to_id("<tool_sep>é\n")
    assert vocab.token_bytes[token_id] == "<tool_sep>é\n".encode()
    assert "<tool_sep>é\n" not in vocab.special_ids
    assert vocab.encode("x<tool_sep>é\n") == [*vocab.encode("x"), token_id]


def test_from_file_reads_configs(tmp_path: Path, sentencepiece_tokenizer: Tokenizer) -> None:
    tok = Tokenizer.from_str(sentencepiece_tokenizer.to_str())
    tok.add_special_tokens(["<stop>", "<halt>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<stop>"}}))
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [tok.token_to_id("<halt>")]})
    )
    expected = {tok.token_to_id(name) for name in ("<stop>", "<halt>", "</s>", "<|endoftext|>")}
    for path in (tmp_path, tmp_path / "tokenizer.json", str(tmp_path)):
        vocab = Vocabulary.from_file(path)
        assert vocab.eos_ids == expected
        assert vocab.token_bytes == Vocabulary.from_tokenizers(tok).token_bytes
    assert Vocabulary.from_file(tmp_path, eos_tokens=["<halt>"]).eos_ids == {tok.token_to_id("<halt>")}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<missing>"}))
    with pytest.raises(VocabularyError, match="<missing>"):
        Vocabulary.from_file(tmp_path)
    with pytest.raises(VocabularyError, match="no tokenizer file"):
        Vocabulary.from_file(tmp_path / "nowhere")


def test_from_hf_uses_backend_and_eos_id(bytelevel_tokenizer: Tokenizer) -> None:
    eos = bytelevel_tokenizer.token_to_id("<tool_call>")
    fake = SimpleNamespace(backend_tokenizer=bytelevel_tokenizer, eos_token_id=eos)
    vocab = Vocabulary.from_hf(fake, vocab_size=1000)
    assert eos in vocab.eos_ids and vocab.size == 1000
    assert vocab.tokenizer is bytelevel_tokenizer


def plain_tokenizer(model: models.Model, decoder: decoders.Decoder | None = None) -> Tokenizer:
    """A whitespace-split tokenizer around `model`, optionally with a decoder."""
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if decoder is not None:
        tok.decoder = decoder
    return tok


def test_plain_utf8_vocabulary() -> None:
    tok = plain_tokenizer(models.WordLevel({"<unk>": 0, "héllo": 1, "<eos>": 2}, unk_token="<unk>"))
    tok.add_special_tokens(["<eos>"])
    vocab = Vocabulary.from_tokenizers(tok)
    assert vocab.token_bytes == [b"<unk>", "héllo".encode(), None]
    assert vocab.eos_ids == {2}


def test_wordpiece_is_rejected() -> None:
    tok = plain_tokenizer(
        models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"), decoders.WordPiece()
    )
    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_tokenizers(tok)
    tok.decoder = None
    with pytest.raises(VocabularyError, match="word-piece"):
        Vocabulary.from_tokenizers(tok)


def test_missing_eos_is_an_error() -> None:
    tok = plain_tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
    with pytest.raises(VocabularyError, match="no EOS"):
        Vocabulary.from_tokenizers(tok)


def test_from_bytes_greedy_encoding() -> None:
    vocab = Vocabulary.from_bytes([b"a", b"b", b"ab", b"abc", b"<eos>", b"c"], eos_id=4)
    assert vocab.tokenizer is None and vocab.size == 6
    assert vocab.token_bytes[4] is None and vocab.eos_ids == {4}
    assert vocab.encode("abcab") == [3, 2]
    assert vocab.encode(b"cba") == [5, 1, 0]
    assert vocab.decode([3, 4, 2]) == b"abcab"
    with pytest.raises(VocabularyError, match="0x64"):
        vocab.encode("abd")
    with pytest.raises(VocabularyError, match="outside"):
        Vocabulary.from_bytes([b"a"], eos_id=1)


def test_fingerprint_tracks_tokens_and_eos(tokenizer: Tokenizer, vocab: Vocabulary) -> None:
    fingerprint = vocab.fingerprint
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    assert Vocabulary.from_tokenizers(tokenizer).fingerprint == fingerprint
    assert Vocabulary.from_tokenizers(tokenizer, eos_tokens=["</s>"]).fingerprint != fingerprint
    assert Vocabulary.from_tokenizers(tokenizer, vocab_size=vocab.size + 1).fingerprint != fingerprint
    joined = Vocabulary.from_bytes([b"ab", b"", b"."], eos_id=2)
    assert joined.fingerprint != Vocabulary.from_bytes([b"a", b"b", b"."], eos_id=2).fingerprint


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma3", "gpt2", "llama3", "mistral-v3", "qwen2.5", "smollm2"])
def test_shared_tokenizer(name: str) -> None:
    folder = TOKENIZERS / name
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"no shared tokenizer {folder}")
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    ids = [*spec["model"]["vocab"].values(), *(token["id"] for token in spec["added_tokens"])]
    vocab = Vocabulary.from_file(folder)
    assert vocab.size == max(ids) + 1
    eos_name = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["eos_token"]
    assert vocab.special_ids[eos_name] in vocab.eos_ids
    for token in spec["added_tokens"]:
        if token["special"]:
            assert vocab.token_bytes[token["id"]] is None
    for text in SAMPLES:
        assert vocab.decode(vocab.encode(text)) == text.encode()
    sample = [i for i in range(0, vocab.size, 97) if vocab.token_bytes[i]]
    for token_id, text in zip(sample, vocab.tokenizer.decode_batch([[i] for i in sample]), strict=True):
        if "\ufffd" not in text:
            token = vocab.token_bytes[token_id].decode()
            assert text in (
                token,
                token.removeprefix(" "),
            )  # SentencePiece decoders may strip a leading space
