"""The packed-bitmask path: the per-sequence policy's verbs, the batched fill and the in-place apply kernel."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController, fill_bitmasks
from tooldec.errors import TokenRejectedError
from tooldec.index import FINAL, pack_bool, unpack
from tooldec.specs import ToolSet, ToolSpec
from tooldec.vocab import Vocabulary

TOOLS = ToolSet(
    [
        ToolSpec(
            "get_weather",
            "",
            {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        ),
        ToolSpec("add", "", {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}),
    ]
)


def _mask(policy: CallController | FreeController, words: int) -> np.ndarray:
    out = np.zeros((1, words), dtype=np.int32)
    policy.fill_bitmask(out, 0)
    return out[0].copy()


def _walk(policy: CallController, rng: random.Random, steps: int) -> list[np.ndarray]:
    """Take up to `steps` random allowed tokens; return the mask seen before each one (and after the last)."""
    words = policy.prepared.words
    masks = [_mask(policy, words)]
    for _ in range(steps):
        if policy.is_terminated():
            break
        allowed = np.flatnonzero(unpack(masks[-1], policy.vocab.size))
        assert allowed.size, "a live policy always allows some token"
        policy.accept_token(int(rng.choice(allowed.tolist())))
        masks.append(_mask(policy, words))
    return masks


@pytest.fixture(scope="module")
def grammar(bytelevel_vocab: Vocabulary):  # type: ignore[no-untyped-def]
    return Compiler(bytelevel_vocab).compile(TOOLS, "json")  # after the <tool_call> control token


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), steps=st.integers(1, 60), back=st.integers(0, 60),
       choice=st.sampled_from(["auto", "required"]))
def test_rollback_restores_every_earlier_mask(grammar, seed: int, steps: int, back: int, choice: str) -> None:  # type: ignore[no-untyped-def]
    """After n tokens and rollback(k), the mask, tokens and calls are those seen after n - k tokens."""
    policy = CallController(grammar, trigger="<tool_call>", tool_choice=choice, after_call="text", max_calls=3)
    masks = _walk(policy, random.Random(seed), steps)
    taken = len(masks) - 1
    k = min(back, taken)
    tokens, events = list(policy.tokens), list(policy.events)
    policy.rollback(k)
    assert np.array_equal(_mask(policy, policy.prepared.words), masks[taken - k])
    assert policy.tokens == tokens[: taken - k]
    assert all(e in events for e in policy.events) and len(policy.events) <= len(events)
    policy.accept_tokens(tokens[taken - k :])
    assert policy.tokens == tokens and len(policy.events) == len(events)
    assert np.array_equal(_mask(policy, policy.prepared.words), masks[-1])


def test_calls_are_valid_and_only_eos_follows_the_end(grammar, bytelevel_vocab: Vocabulary) -> None:  # type: ignore[no-untyped-def]
    """Random walks under the policy always finish valid calls; once terminated only EOS is allowed."""
    finished = 0
    for seed in range(20):
        policy = CallController(grammar, trigger="<tool_call>", tool_choice="required")
        _walk(policy, random.Random(seed), 400)
        if not policy.is_terminated():
            continue
        finished += 1
        (event,) = policy.events
        (call,) = event.calls
        jsonschema.validate(call.arguments, TOOLS[call.name].parameters)
        assert set(np.flatnonzero(unpack(_mask(policy, policy.prepared.words), bytelevel_vocab.size))) == set(
            bytelevel_vocab.eos_ids
        )
        policy.accept_token(min(bytelevel_vocab.eos_ids))
        with pytest.raises(TokenRejectedError):
            policy.accept_token(next(t for t in range(bytelevel_vocab.size) if t not in bytelevel_vocab.eos_ids))
    assert finished >= 10


def test_validate_tokens_counts_the_valid_prefix_and_changes_nothing(grammar, bytelevel_vocab: Vocabulary) -> None:  # type: ignore[no-untyped-def]
    policy = CallController(grammar, trigger="<tool_call>", tool_choice="required")
    good = policy.forced() + bytelevel_vocab.encode('{"name": "add", "arguments": {"a": 1')
    bad = bytelevel_vocab.encode('{"name": "sub')
    before = _mask(policy, policy.prepared.words)
    assert policy.validate_tokens(good) == len(good)
    prefix = policy.forced() + bad
    n = policy.validate_tokens(prefix)
    assert 0 < n < len(prefix)
    assert policy.tokens == [] and np.array_equal(_mask(policy, policy.prepared.words), before)
    with pytest.raises(TokenRejectedError):
        policy.accept_tokens(prefix)
    assert policy.tokens == [], "a rejected batch of tokens is undone as a whole"


def test_text_mode_mask_bans_tokens_that_run_past_the_trigger(bytelevel_vocab: Vocabulary) -> None:
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "toolken")
    policy = CallController(grammar, trigger="<", tool_choice="auto", after_call="text")
    allowed = unpack(_mask(policy, policy.prepared.words), bytelevel_vocab.size)
    for t, data in enumerate(bytelevel_vocab.token_bytes):
        if data and b"<" in data[:-1]:
            assert not allowed[t], data
    none = CallController(grammar, trigger="<", tool_choice="none")
    banned = ~unpack(_mask(none, none.prepared.words), bytelevel_vocab.size)
    assert all(b"<" in (bytelevel_vocab.token_bytes[t] or b"") for t in np.flatnonzero(banned))
    policy.reset()
    assert policy.tokens == [] and not policy.is_terminated()


def test_batch_fill_equals_row_by_row(grammar, bytelevel_vocab: Vocabulary) -> None:  # type: ignore[no-untyped-def]
    policies: list[CallController | FreeController] = []
    for seed in range(40):
        p = CallController(grammar, trigger="<tool_call>", tool_choice="auto" if seed % 3 else "required")
        _walk(p, random.Random(seed), seed % 25)
        policies.append(p)
    policies.append(FreeController(bytelevel_vocab, None))
    words = policies[0].prepared.words  # type: ignore[union-attr]
    want = np.stack([_mask(p, words) for p in policies])
    for threads in (1, 3):
        out = np.full((len(policies) + 2, words), 7, dtype=np.int32)
        rows = list(range(2, len(policies) + 2))
        fill_bitmasks(policies, out, rows, threads=threads)
        assert np.array_equal(out[2:], want)
        assert (out[:2] == 7).all(), "rows not asked for are left alone"


@pytest.mark.parametrize(("vocab_size", "width"), [(100, 100), (100, 130), (70, 64), (33, 40)])
def test_apply_kernel_matches_torch(vocab_size: int, width: int) -> None:
    """The compiled apply and torch's fallback both give -inf exactly outside the mask (and past its reach)."""
    torch = pytest.importorskip("torch")
    from tooldec.decoding.sampling import apply_token_bitmask_inplace

    rng = np.random.default_rng(vocab_size + width)
    words = (vocab_size + 31) // 32
    bits = rng.random((5, vocab_size)) < 0.3
    bits[1] = True
    bits[2] = False
    bitmask = np.stack([pack_bool(b, words) for b in bits])
    logits = torch.tensor(rng.standard_normal((5, width)), dtype=torch.float32)
    keep = np.zeros((5, width), dtype=bool)
    keep[:, : min(width, vocab_size)] = bits[:, :width]
    want = torch.where(torch.from_numpy(keep), logits, torch.tensor(float("-inf")))
    fast = logits.clone()
    apply_token_bitmask_inplace(fast, bitmask)
    assert torch.equal(fast, want)
    slow = logits.double()
    apply_token_bitmask_inplace(slow, bitmask)
    assert torch.equal(slow.float(), want)
    some = logits.clone()
    apply_token_bitmask_inplace(some, bitmask, [1, 3])
    assert torch.equal(some[[0, 2, 4]], logits[[0, 2, 4]]) and torch.equal(some[3], want[3])


def test_engine_and_policy_import_without_torch() -> None:
    """The core (compiler, index, guide, policy) never imports torch."""
    code = (
        "import sys\n"
        "import tooldec.compiler, tooldec.decoding, tooldec.decoding.controller, tooldec.guide\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_eos_leads_to_final(grammar, bytelevel_vocab: Vocabulary) -> None:  # type: ignore[no-untyped-def]
    guide = Compiler(bytelevel_vocab).compile(TOOLS, "json").guide()
    for t in bytelevel_vocab.encode(json.dumps({"name": "add", "arguments": {"a": 2}})):
        guide.advance(t)
    guide.advance(min(bytelevel_vocab.eos_ids))
    assert guide.state == FINAL
