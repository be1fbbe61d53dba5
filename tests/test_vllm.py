"""tooldec inside vLLM.

Unit tier (no vLLM needed): the request payload, and the per-row bookkeeping of vLLM's persistent batch driven by
fake batch updates (removed, added, moved; a slot reused by a new request gets a fresh policy) and by a small
simulated engine whose sampled calls must all be valid.

vLLM tier (marker `vllm`): vLLM's OpenAI server with tooldec's tool parser and logits processor, on the default
model, queried with the `openai` client: calls in auto, required and named modes, streamed and not, concurrent
requests, malformed payloads. It needs a python with vLLM and tooldec installed: `TOOLDEC_VLLM_PYTHON`, or the
running one; skipped otherwise. See README "vLLM".
"""

from __future__ import annotations

import enum
import importlib.util
import itertools
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tooldec.chat import CallsOnly
from tooldec.chat.reader import WRAPPED, call_blocks, opening_overlap
from tooldec.compiler import Compiler
from tooldec.decoding import CallController
from tooldec.decoding.trigger import Triggers
from tooldec.errors import TokenRejectedError
from tooldec.eval.metrics import SyntaxChecker
from tooldec.grammar.calls import name_aliases, with_aliases
from tooldec.integrations.batch import (
    PAYLOAD_KEY,
    PolicyBatch,
    PolicyFactory,
    ToolRequest,
    ToolRequestError,
    check_compiles,
    tool_payload,
)
from tooldec.specs import from_openai_tools
from tooldec.vocab import Vocabulary

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]
NAMED = {"type": "function", "function": {"name": "add"}}


# ---------------------------------------------------------------------------------------------- unit tier


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    """Every single byte, some multi-byte pieces of calls and text, EOS last."""
    pieces = [bytes([b]) for b in range(256)]
    pieces += [b"<tool_call>", b"</tool_call>", b"<tool", b"_call>", b'{"name": "', b'", "arguments": {',
               b"get_weather", b"add", b"city", b"Paris", b" the", b"\n", b"12", b"e5", b"}}"]
    pieces = list(dict.fromkeys(pieces))
    return Vocabulary.from_bytes([*pieces, None], eos_id=len(pieces))


@pytest.fixture(scope="module")
def factory(vocab: Vocabulary) -> PolicyFactory:
    return PolicyFactory(Compiler(vocab), "hermes")


@dataclass
class Params:
    """The part of vLLM's SamplingParams the batch reads."""

    extra_args: dict[str, Any] | None = None


class Direction(enum.Enum):
    """vLLM's MoveDirectionality."""

    UNIDIRECTIONAL = enum.auto()
    SWAP = enum.auto()


@dataclass
class Update:
    """vLLM's BatchUpdate: removed rows, added (row, params, prompt_ids, output_ids), moved (a, b, direction)."""

    removed: list[int] = field(default_factory=list)
    added: list[tuple[int, Params, list[int], list[int]]] = field(default_factory=list)
    moved: list[tuple[int, int, Direction]] = field(default_factory=list)


def apply_update(batch: PolicyBatch, update: Update) -> None:
    batch.update(update.removed, update.added, update.moved)


def tooled(choice: Any = "auto", **kw: Any) -> Params:
    return Params(tool_payload(TOOLS, choice, **kw))


def masked(batch: PolicyBatch, rows: int) -> np.ndarray:
    """Apply the batch to zero logits; True where a token stays allowed."""
    import torch

    logits = torch.zeros((rows, batch.factory.prepared.size), dtype=torch.float32)
    batch.apply(logits)
    return torch.isfinite(logits).numpy()


def allowed_text(vocab: Vocabulary, row_mask: np.ndarray) -> set[bytes | None]:
    return {vocab.token_bytes[i] for i in np.flatnonzero(row_mask)}


def test_payload_round_trip() -> None:
    payload = tool_payload(TOOLS, NAMED, parallel_tool_calls=False, syntax="hermes", max_calls=2)
    assert list(payload) == [PAYLOAD_KEY] and isinstance(payload[PAYLOAD_KEY], str)
    request = ToolRequest.from_extra_args({**payload, "other": 1})
    assert request is not None
    assert (request.mode, request.named, request.parallel, request.syntax, request.max_calls) == (
        "required", "add", False, "hermes", 2)
    assert request.tools.names == ("get_weather", "add") and request.call_tools.names == ("add",)
    plain = ToolRequest.from_payload({"tools": TOOLS})
    assert (plain.mode, plain.named, plain.parallel) == ("auto", None, True)
    assert ToolRequest.from_extra_args(None) is None and ToolRequest.from_extra_args({"x": "y"}) is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "JSON object"),
        (json.dumps({"tools": []}), "non-empty list of tools"),
        (json.dumps({"tools": TOOLS, "tool_choice": "sometimes"}), "tool_choice must be"),
        (json.dumps({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
         "'nope', which is not one of the tools"),
        (json.dumps({"tools": TOOLS, "tool_choice": {"type": "function"}}), "named tool_choice"),
        (json.dumps({"tools": TOOLS, "parallel_tool_calls": "yes"}), "parallel_tool_calls"),
        (json.dumps({"tools": TOOLS, "syntax": "xml"}), "unknown call syntax"),
        (json.dumps({"tools": TOOLS, "max_calls": 0}), "max_calls"),
        (json.dumps({"tools": TOOLS, "layout": "pretty"}), "unknown call layout"),
        (json.dumps({"tools": TOOLS, "tool": 1}), "unknown tooldec payload field"),
        (json.dumps({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]}),
         "invalid tools"),
    ],
)
def test_bad_payloads_name_the_problem(payload: str, message: str) -> None:
    with pytest.raises(ToolRequestError, match=message) as err:
        ToolRequest.from_extra_args({PAYLOAD_KEY: payload})
    assert isinstance(err.value, ValueError)  # vLLM answers ValueError from validate_params with HTTP 400


def test_payload_must_be_a_string() -> None:
    with pytest.raises(ToolRequestError, match="JSON string"):
        ToolRequest.from_extra_args({PAYLOAD_KEY: ["a"]})


def test_check_compiles_refuses_what_tooldec_cannot_enforce() -> None:
    check_compiles(tool_payload(TOOLS)[PAYLOAD_KEY], "hermes")
    unique = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}}}]
    with pytest.raises(ToolRequestError, match="uniqueItems"):
        check_compiles(tool_payload(unique)[PAYLOAD_KEY], "hermes")
    empty = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]}}}]
    with pytest.raises(ToolRequestError):
        check_compiles(tool_payload(empty)[PAYLOAD_KEY], "hermes")


def test_factory_maps_tool_choice(factory: PolicyFactory) -> None:
    auto = factory.policy(ToolRequest.from_payload({"tools": TOOLS}))
    assert auto.tool_choice == "auto" and auto.after_call == "text" and auto.mode.value == "text"
    assert isinstance(auto.trigger, Triggers) and [t.text for t in auto.trigger.members] == [
        b"<tool_call>", b"```json", b'{"name": "', b'{\n  "name": "', b'{\n    "name": "']
    required = factory.policy(ToolRequest.from_payload({"tools": TOOLS, "tool_choice": "required"}))
    assert required.mode.value == "tool" and required.forced()  # the trigger is forced
    single = factory.policy(ToolRequest.from_payload({"tools": TOOLS, "parallel_tool_calls": False}))
    assert single.after_call == "stop" and single.max_calls == 1
    named = factory.policy(ToolRequest.from_payload({"tools": TOOLS, "tool_choice": NAMED}))
    assert named.grammar.tools is not None and named.grammar.tools.names == ("add",)
    none = factory.policy(ToolRequest.from_payload({"tools": TOOLS, "tool_choice": "none"}))
    assert none.tool_choice == "none" and none.trigger is not None and none.trigger.text == b"<tool_call>"


def test_a_markdown_json_block_with_a_suffix_name_is_a_guided_call(factory: PolicyFactory, vocab: Vocabulary) -> None:
    """The processor guides a call opened by ```json and naming get_weather by its suffix `weather`; the parser's
    block reader finds it (a fence inside a string argument does not end it) and the alias table names it."""
    policy = factory.policy(ToolRequest.from_payload({"tools": TOOLS}))
    text = 'Sure.\n```json\n{"name": "weather", "arguments": {"city": "a```b"}}\n```'
    [event] = policy.accept_tokens(vocab.encode(text))
    assert [(c.name, c.arguments) for c in event.calls] == [("get_weather", {"city": "a```b"})]
    with pytest.raises(TokenRejectedError):  # guided: no other name
        factory.policy(ToolRequest.from_payload({"tools": TOOLS})).accept_tokens(
            vocab.encode('```json\n{"name": "weathers'))
    [block] = call_blocks(text + " more")
    assert text[block.start :].startswith("```json") and block.complete and block.end == len(text)
    assert json.loads(block.json) == {"name": "weather", "arguments": {"city": "a```b"}}
    assert name_aliases(t["function"]["name"] for t in TOOLS) == {"weather": "get_weather"}
    first, second = call_blocks('<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>```json\n{"na')
    assert first.complete and not second.complete and second.json == '{"na'
    assert [opening_overlap(t) for t in ("see ``", "see <tool_ca", "done.", "```json")] == [2, 8, 0, 0]


PRETTY = json.dumps({"name": "weather", "arguments": {"city": "Paris", "days": [1, 2]}}, indent=2)
"""A call as Qwen2.5-Coder pretty-prints it in its Markdown JSON blocks (naming get_weather by its suffix)."""


def test_the_lines_layout_guides_a_pretty_printed_call(factory: PolicyFactory, vocab: Vocabulary) -> None:
    """Asked for (the request's `layout`, or the factory's default), a guided call may keep the model's line
    breaks; compact, the first line break inside the call is refused. The parser's block reader reads both."""
    text = f"Sure.\n```json\n{PRETTY}\n```"
    pretty_tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "array", "items": {
            "type": "integer"}}}}}}]
    lines = PolicyFactory(factory.compiler, "hermes", "lines")
    for policy in (factory.policy(ToolRequest.from_payload({"tools": pretty_tools, "layout": "lines"})),
                   lines.policy(ToolRequest.from_payload({"tools": pretty_tools}))):
        [event] = policy.accept_tokens(vocab.encode(text))
        assert [(c.name, c.arguments) for c in event.calls] == [("get_weather", {"city": "Paris", "days": [1, 2]})]
    compact = factory.policy(ToolRequest.from_payload({"tools": pretty_tools}))
    tokens = vocab.encode(text)
    assert vocab.decode(tokens[: compact.validate_tokens(tokens)]) == b"Sure.\n```json\n{"
    back = lines.policy(ToolRequest.from_payload({"tools": pretty_tools, "layout": "compact"}))
    assert back.validate_tokens(tokens) == compact.validate_tokens(tokens)  # a request may ask for compact
    [block] = call_blocks(text)
    assert block.complete and json.loads(block.json)["arguments"] == {"city": "Paris", "days": [1, 2]}


def test_a_layout_the_syntax_lacks_is_refused(factory: PolicyFactory) -> None:
    payload = tool_payload(TOOLS, layout="lines")[PAYLOAD_KEY]
    check_compiles(payload, "hermes")
    for syntax in ("llama31", "mistral"):
        with pytest.raises(ToolRequestError, match="exists for hermes calls only"):
            check_compiles(payload, syntax)
        with pytest.raises(ToolRequestError, match="exists for hermes calls only"):
            factory.policy(ToolRequest.from_payload({"tools": TOOLS, "syntax": syntax, "layout": "lines"}))
    with pytest.raises(ValueError, match="exists for hermes calls only"):
        PolicyFactory(factory.compiler, "llama31", "lines")
    with pytest.raises(ValueError, match="unknown call layout"):
        PolicyFactory(factory.compiler, "hermes", "pretty")


def test_required_calls_come_back_to_back_then_eos(factory: PolicyFactory, vocab: Vocabulary) -> None:
    policy = factory.policy(ToolRequest.from_payload({"tools": TOOLS, "tool_choice": "required"}))
    assert isinstance(policy, CallsOnly)
    words = factory.prepared.words

    def allowed() -> set[bytes | None]:
        out = np.zeros((1, words), dtype=np.int32)
        policy.fill_bitmask(out, 0)
        from tooldec.index import unpack

        return {vocab.token_bytes[i] for i in np.flatnonzero(unpack(out[0], vocab.size))}

    assert allowed() == {b"<tool_call>"}  # the trigger is forced
    policy.accept_tokens(vocab.encode('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'))
    assert len(policy.events) == 1
    gap = allowed()
    assert None in gap and b"<tool_call>" in gap and b"<tool" in gap and b"<" in gap
    assert b"\n" in gap and b" the" not in gap and b"x" not in gap, "a line break may stand before the next call"
    with pytest.raises(TokenRejectedError):
        policy.accept_token(vocab.encode(" the")[0])
    before = len(policy.tokens)
    assert policy.validate_tokens(vocab.encode("<tool_call>\nx")) == 2 and len(policy.tokens) == before
    policy.accept_tokens(vocab.encode("<tool"))
    assert allowed() == {b"_", b"_call>"}  # half a trigger: no EOS, no text
    policy.accept_tokens(vocab.encode("_call>"))
    assert allowed() == {b"\n"}  # the next call, guided by the controller again
    policy.rollback(2)
    assert None in allowed() and b"<tool_call>" in allowed()  # back after the first call
    policy.accept_token(min(vocab.eos_ids))
    assert policy.is_terminated()
    policy.reset()
    assert policy.tokens == [] and allowed() == {b"<tool_call>"}
    # auto mode, or one call only (parallel_tool_calls false): the plain controller
    assert isinstance(factory.policy(ToolRequest.from_payload({"tools": TOOLS})), CallController)
    assert isinstance(factory.policy(ToolRequest.from_payload(
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False})), CallController)


def test_rows_without_payload_are_untouched(factory: PolicyFactory, vocab: Vocabulary) -> None:
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, Params(), [1], []), (1, Params({"x": "y"}), [1], [])]))
    assert len(batch) == 0
    assert masked(batch, 2).all()


def test_required_row_is_masked_and_others_are_not(factory: PolicyFactory, vocab: Vocabulary) -> None:
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, Params(), [1], []), (1, tooled("required"), [1], [])]))
    mask = masked(batch, 2)
    assert mask[0].all()
    assert allowed_text(vocab, mask[1]) == {b"<tool_call>"}


def test_auto_row_bans_only_a_trigger_that_runs_on(factory: PolicyFactory, vocab: Vocabulary) -> None:
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, tooled("auto"), [1], [])]))
    mask = masked(batch, 1)[0]
    assert mask[vocab.encode("<tool_call>")[0]] and mask[vocab.encode(" the")[0]]
    none = PolicyBatch(factory)
    apply_update(none, Update(added=[(0, tooled("none"), [1], [])]))
    mask = masked(none, 1)[0]
    assert not mask[vocab.encode("<tool_call>")[0]] and mask[vocab.encode(" the")[0]]


def test_new_tokens_are_fed_before_each_apply(factory: PolicyFactory, vocab: Vocabulary) -> None:
    output: list[int] = []
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, tooled(NAMED), [1], output)]))
    output += vocab.encode('<tool_call>\n{"name": "add", "arguments": {"a": ')
    mask = masked(batch, 1)[0]
    row = batch.rows[0]
    assert row.seen == len(output) and row.policy.tokens == output  # type: ignore[union-attr]
    assert allowed_text(vocab, mask) >= {b"1", b"-", b"12"} and b"a" not in allowed_text(vocab, mask)
    output.append(-1)  # an asynchronous step's placeholder: not fed until it is the real token
    masked(batch, 1)
    assert row.seen == len(output) - 1


def test_slot_reused_by_a_new_request_gets_a_fresh_policy(factory: PolicyFactory, vocab: Vocabulary) -> None:
    first: list[int] = []
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, tooled("required"), [1], first)]))
    first += vocab.encode('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa')
    masked(batch, 1)
    old = batch.rows[0].policy
    assert old.tokens == first  # type: ignore[union-attr]
    # the request finishes; a new one takes slot 0 in the same update (removed, then added)
    second: list[int] = []
    apply_update(batch, Update(removed=[0], added=[(0, tooled("required"), [1], second)]))
    new = batch.rows[0].policy
    assert new is not old and new.tokens == []  # type: ignore[union-attr]
    assert allowed_text(vocab, masked(batch, 1)[0]) == {b"<tool_call>"}
    # an added row replaces its slot even when vLLM does not list the old request as removed
    apply_update(batch, Update(added=[(0, tooled("required"), [1], [])]))
    assert batch.rows[0].policy is not new
    # a request without tools in a slot that had a guided one is left alone
    apply_update(batch, Update(removed=[0], added=[(0, Params(), [1], [])]))
    assert 0 not in batch.rows and masked(batch, 1).all()


def test_moves_and_swaps_carry_the_state(factory: PolicyFactory, vocab: Vocabulary) -> None:
    batch = PolicyBatch(factory)
    outputs: list[list[int]] = [[], [], []]
    apply_update(batch, Update(added=[(0, tooled("required"), [1], outputs[0]), (1, Params(), [1], outputs[1]),
                                      (2, tooled("auto"), [1], outputs[2])]))
    outputs[0] += vocab.encode("<tool_call>")
    masked(batch, 3)
    p0, p2 = batch.rows[0].policy, batch.rows[2].policy
    # row 1 finished; vLLM condenses the batch by moving row 2 into it
    apply_update(batch, Update(removed=[1], moved=[(2, 1, Direction.UNIDIRECTIONAL)]))
    assert batch.rows[1].policy is p2 and 2 not in batch.rows
    apply_update(batch, Update(moved=[(0, 1, Direction.SWAP)]))
    assert batch.rows[0].policy is p2 and batch.rows[1].policy is p0
    mask = masked(batch, 2)
    assert allowed_text(vocab, mask[1]) == {b"\n"}  # row 1 (moved) still continues its own call
    assert mask[0, vocab.encode(" the")[0]]  # row 0: auto, text mode
    # a swap with an empty row is a move
    apply_update(batch, Update(moved=[(1, 3, Direction.SWAP)]))
    assert 1 not in batch.rows and batch.rows[3].policy is p0


def test_a_token_outside_the_mask_stops_guidance_of_that_row(factory: PolicyFactory, vocab: Vocabulary,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    output: list[int] = []
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, tooled("required"), [1], output), (1, tooled("required"), [1], [])]))
    output += vocab.encode("x")
    mask = masked(batch, 2)
    assert batch.rows[0].off and "did not allow" in caplog.text
    assert mask[0].all() and allowed_text(vocab, mask[1]) == {b"<tool_call>"}


def test_tools_that_fail_to_compile_end_the_request(factory: PolicyFactory, vocab: Vocabulary,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(request: ToolRequest) -> CallController:
        raise RuntimeError("boom")

    batch = PolicyBatch(factory)
    monkeypatch.setattr(factory, "policy", broken)
    apply_update(batch, Update(added=[(0, tooled(), [1], [])]))
    assert allowed_text(vocab, masked(batch, 1)[0]) == {None}  # EOS only
    assert np.flatnonzero(masked(batch, 1)[0]).tolist() == sorted(vocab.eos_ids)


def test_malformed_payload_in_the_engine_is_not_guided(factory: PolicyFactory) -> None:
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, Params({PAYLOAD_KEY: "{"}), [1], [])]))
    assert len(batch) == 0


def test_a_row_whose_policy_never_masks_is_not_kept(factory: PolicyFactory) -> None:
    """Python calls with tool_choice none get a FreeController: nothing to feed or mask, so no row is kept."""
    from tooldec.decoding import FreeController

    request = ToolRequest.from_payload(tool_payload(TOOLS, "none", syntax="python")[PAYLOAD_KEY])
    assert isinstance(factory.policy(request), FreeController)
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(0, tooled("none", syntax="python"), [1], [5, 6]),
                                      (1, tooled("required"), [1], [])]))
    assert list(batch.rows) == [1]
    mask = masked(batch, 2)
    assert mask[0].all() and not mask[1].all()


def test_rows_past_the_logits_are_skipped(factory: PolicyFactory) -> None:
    batch = PolicyBatch(factory)
    apply_update(batch, Update(added=[(5, tooled("required"), [1], [])]))
    assert masked(batch, 2).all()


def test_simulated_engine_writes_only_valid_calls(factory: PolicyFactory, vocab: Vocabulary) -> None:
    """A tiny persistent-batch engine with random logits: requests join freed slots, rows get condensed, and
    every call written in every mode is valid."""
    import torch

    rng = random.Random(7)
    gen = torch.Generator().manual_seed(7)
    choices: list[Any] = ["auto", "required", NAMED, "none", None]
    pending = [(i, choices[i % len(choices)]) for i in range(40)]
    batch = PolicyBatch(factory)
    slots: dict[int, tuple[int, Any, list[int]]] = {}
    finished: list[tuple[Any, list[int]]] = []
    checker = SyntaxChecker(from_openai_tools(TOOLS), with_aliases("hermes", from_openai_tools(TOOLS)))
    eos = min(vocab.eos_ids)
    while pending or slots:
        update = Update()
        for row in [r for r, (_, _, out) in slots.items() if out and out[-1] == eos or len(out) >= 120]:
            update.removed.append(row)
            finished.append((slots[row][1], slots.pop(row)[2]))
        while pending and len(slots) < 6:  # fill free slots, lowest first (vLLM reuses removed indices)
            row = next(r for r in range(6) if r not in slots)
            number, choice = pending.pop(0)
            out: list[int] = []
            slots[row] = (number, choice, out)
            params = Params() if choice is None else tooled(choice, parallel_tool_calls=number % 2 == 0)
            update.added.append((row, params, [1], out))
        if update.removed and rng.random() < 0.5 and slots:  # condense: move the last row into a hole
            last = max(slots)
            hole = next((r for r in range(last) if r not in slots), None)
            if hole is not None:
                slots[hole] = slots.pop(last)
                update.moved.append((last, hole, Direction.UNIDIRECTIONAL))
        apply_update(batch, update)
        if not slots:
            continue
        rows = max(slots) + 1
        logits = torch.randn((rows, vocab.size), generator=gen) * 3
        logits[:, eos] -= 4  # keep answers going for a while
        batch.apply(logits)
        for row, (_, _, out) in slots.items():
            probs = torch.softmax(logits[row], dim=-1)
            out.append(int(torch.multinomial(probs, 1, generator=gen)))
    calls = 0
    for choice, out in finished:
        text = b"".join(vocab.token_bytes[t] or b"" for t in out if t != eos).decode("utf-8", "replace")
        # `<tool_call>` tags, ```json blocks or bare objects; where no call is guided ("none", no tools) a bare
        # object is content, so only the wrapped shapes are read there, as before bare calls were
        blocks = call_blocks(text) if choice not in ("none", None) else call_blocks(text, WRAPPED)
        if choice == "none":
            assert "<tool_call>" not in text
        if choice in ("required", NAMED):  # calls back to back, then EOS
            assert blocks and blocks[0].start == 0, text
            assert all(not text[a.end : b.start].strip() for a, b in itertools.pairwise(blocks)), text
        for block in blocks:
            written = text[block.start : block.end]
            if not written.endswith(("</tool_call>", "\n```")):
                continue  # cut by the length limit
            check = checker.classify(written)
            assert check.kind is None, (check, text)
            if choice == NAMED:
                assert check.call is not None and check.call.name == "add"
            calls += 1
    assert calls >= 10


# ---------------------------------------------------------------------------------------------- vLLM tier


def _vllm_python() -> str | None:
    """A python that imports vLLM and tooldec's integration: TOOLDEC_VLLM_PYTHON (which must work), else this
    one when it has vLLM, else None."""
    python = os.environ.get("TOOLDEC_VLLM_PYTHON")
    if not python:
        return sys.executable if importlib.util.find_spec("vllm") is not None else None
    probe = subprocess.run([python, "-c", "import vllm, tooldec.integrations.vllm"], capture_output=True,
                           text=True, timeout=300, check=False)
    if probe.returncode != 0:
        pytest.fail(f"TOOLDEC_VLLM_PYTHON={python} cannot import vllm and tooldec: {probe.stderr[-2000:]}")
    return python


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """vLLM's OpenAI server with tooldec, on the default model, on a free port of 127.0.0.1."""
    python = _vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed (set TOOLDEC_VLLM_PYTHON to a python that has it; README 'vLLM')")
    if importlib.util.find_spec("openai") is None:
        pytest.fail("the vLLM tier needs the openai client in the test environment: pip install openai")
    from tooldec.backends import fetch_model
    from tooldec.backends.loader import convert_gguf
    from tooldec.integrations.vllm_server import VLLMServer, free_port, server_command

    model = convert_gguf(fetch_model("smollm2", progress=False))
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    # the processor is named on the command line too, as for GPUs (README): the entry point's copy stays passive
    extra = ["--logits-processors", "tooldec.integrations.vllm:ToolDecLogitsProcessor"]
    server = VLLMServer(server_command(python, model, port, served_name="smollm2", extra=extra), port, log_path=log)
    server.start()
    yield server
    server.stop()
    text = Path(log).read_text(errors="replace")
    assert "tool guidance ready" in text and "loaded twice" in text, text[-3000:]
    serving = text.split("[shutdown]")[0]  # vLLM logs its engine's exit on SIGTERM as an error
    assert "Traceback" not in serving and "tooldec: row" not in serving, f"the server logged a problem: {log}"


@pytest.fixture(scope="module")
def client(vllm_server: Any) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=vllm_server.url, api_key="unused", timeout=600, max_retries=0)


SYSTEM = (
    "You can call these functions:\n" + "\n".join(json.dumps(t) for t in TOOLS) + "\n"
    'To call one, write <tool_call>\n{"name": <function name>, "arguments": <JSON object>}\n</tool_call>'
)
FEW_SHOT = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant",
     "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'},
    {"role": "tool", "content": "sunny, 24 C"},
    {"role": "assistant", "content": "It is sunny in Rome, 24 C."},
]
QUESTIONS = ["What is the weather in Paris?", "Add 2.5 and 40.", "How warm is it in Oslo, in fahrenheit?",
             "What is 17 plus 25?", "Weather in Lisbon?", "Please add 1 and 2."]


def _check_answer(response: Any, choice: Any) -> int:
    """Every call the answer holds is valid (and no call was left unparsed in the content); returns how many."""
    checker = SyntaxChecker(from_openai_tools(TOOLS), "hermes")
    message = response.choices[0].message
    assert "<tool_call>" not in (message.content or "") or response.choices[0].finish_reason == "length", message
    for call in message.tool_calls or []:
        check = checker.check((call.function.name, json.loads(call.function.arguments)))
        assert check.kind is None, check
        if isinstance(choice, dict):
            assert call.function.name == choice["function"]["name"]
    if choice == "required" or isinstance(choice, dict):
        assert message.tool_calls, message
    return len(message.tool_calls or [])


def _ask(client: Any, question: str, choice: Any, **kw: Any) -> Any:
    return client.chat.completions.create(
        model="smollm2", messages=[*FEW_SHOT, {"role": "user", "content": question}], tools=TOOLS,
        tool_choice=choice, temperature=kw.pop("temperature", 0), max_tokens=kw.pop("max_tokens", 96), **kw,
    )


@pytest.mark.vllm
@pytest.mark.parametrize("choice", ["auto", "required", NAMED], ids=["auto", "required", "named"])
def test_vllm_calls_are_valid(client: Any, choice: Any) -> None:
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda q: _ask(client, q, choice), QUESTIONS))
    calls = sum(_check_answer(a, choice) for a in answers)
    assert calls >= (1 if choice == "auto" else len(QUESTIONS))


@pytest.mark.vllm
def test_vllm_sampled_calls_are_valid(client: Any) -> None:
    """Temperature 1.5 makes SmolLM2 wander: without guidance its arguments break the schema."""
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: _ask(client, QUESTIONS[i % len(QUESTIONS)], "required",
                                               temperature=1.5, seed=i), range(12)))
    assert sum(_check_answer(a, "required") for a in answers) >= 12


@pytest.mark.vllm
def test_vllm_stream_matches_the_answer(client: Any) -> None:
    answer = _ask(client, "Add 2.5 and 40.", NAMED)
    stream = _ask(client, "Add 2.5 and 40.", NAMED, stream=True)
    name, arguments, finish = None, "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        for call in chunk.choices[0].delta.tool_calls or []:
            if call.function and call.function.name:
                name = call.function.name
            if call.function and call.function.arguments:
                arguments += call.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    expected = answer.choices[0].message.tool_calls[0].function
    assert (name, json.loads(arguments)) == (expected.name, json.loads(expected.arguments))
    assert finish == answer.choices[0].finish_reason


FENCE_SHOT = [
    {"role": "system", "content": SYSTEM.split("To call one")[0]
     + 'To call one, write a JSON block:\n```json\n{"name": <function name>, "arguments": <JSON object>}\n```'},
    {"role": "user", "content": "What is the weather in Rome?"},
    {"role": "assistant", "content": '```json\n{"name": "weather", "arguments": {"city": "Rome"}}\n```'},
    {"role": "tool", "content": "sunny, 24 C"},
    {"role": "assistant", "content": "It is sunny in Rome, 24 C."},
    {"role": "user", "content": "Add 2 and 3."},
    {"role": "assistant", "content": '```json\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n```'},
    {"role": "tool", "content": "5"},
    {"role": "assistant", "content": "2 plus 3 is 5."},
    {"role": "user", "content": "Please add 1 and 2."},
]
"""A few-shot in which calls are Markdown JSON blocks (naming get_weather by its suffix), as Qwen2.5-Coder writes
them; greedy SmolLM2 answers the last question with such a block."""


@pytest.mark.vllm
def test_vllm_markdown_json_call_with_a_suffix_name(client: Any) -> None:
    """In auto mode a call the model opens with ```json is guided (the raw text, through the payload alone,
    is a valid aliased call) and the parser answers it as tool_calls under the tool's own name, streamed too."""
    specs = from_openai_tools(TOOLS)
    raw = client.chat.completions.create(model="smollm2", messages=FENCE_SHOT, max_tokens=64, temperature=0,
                                         extra_body={"vllm_xargs": tool_payload(TOOLS, "auto")})
    text = raw.choices[0].message.content or ""
    assert call_blocks(text), text
    block = call_blocks(text)[0]
    written = text[block.start : block.end]
    assert written.startswith("```json\n") and written.endswith("\n```"), text
    assert SyntaxChecker(specs, with_aliases("hermes", specs)).classify(written).kind is None
    kwargs: dict[str, Any] = {"model": "smollm2", "messages": FENCE_SHOT, "tools": TOOLS, "max_tokens": 64,
                              "temperature": 0}
    answer = client.chat.completions.create(**kwargs)
    assert answer.choices[0].finish_reason == "tool_calls" and "```" not in (answer.choices[0].message.content or "")
    [call] = answer.choices[0].message.tool_calls
    written_name = json.loads(block.json)["name"]
    assert call.function.name == name_aliases(t.name for t in specs).get(written_name, written_name)
    assert _check_answer(answer, "auto") == 1
    name, arguments = None, ""
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            name = name or (delta.function.name if delta.function else None)
            arguments += (delta.function.arguments or "") if delta.function else ""
    assert (name, json.loads(arguments)) == (call.function.name, json.loads(call.function.arguments))


PRETTY_SHOT = [
    {**m, "content": m["content"].replace(block, json.dumps(json.loads(block), indent=2))}
    if m["role"] == "assistant" and (block := m["content"].removeprefix("```json\n").removesuffix("\n```")) != m["content"]
    else m
    for m in FENCE_SHOT
]
"""FENCE_SHOT with its calls pretty-printed, as Qwen2.5-Coder writes them."""


@pytest.mark.vllm
def test_vllm_the_lines_layout_keeps_a_pretty_printed_call(client: Any) -> None:
    """A request whose payload asks for the lines layout keeps the model's pretty-printed call (guided, valid);
    compact, the same model is held to one line. The parser reads both."""
    specs = from_openai_tools(TOOLS)
    written = {}
    for layout in ("lines", "compact"):
        raw = client.chat.completions.create(model="smollm2", messages=PRETTY_SHOT, max_tokens=64, temperature=0,
                                             extra_body={"vllm_xargs": tool_payload(TOOLS, "auto", layout=layout)})
        text = raw.choices[0].message.content or ""
        [block, *_] = call_blocks(text)
        assert block.complete, text
        assert SyntaxChecker(specs, with_aliases("hermes-lines", specs)).classify(text[block.start : block.end]).kind is None
        written[layout] = block.json
    assert "\n" in written["lines"] and "\n" not in written["compact"], written
    assert json.loads(written["lines"])["name"] in ("add", "weather", "get_weather")


@pytest.mark.vllm
def test_vllm_request_without_tools_is_plain(client: Any) -> None:
    answer = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Say hi."}],
                                            max_tokens=8, temperature=0)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"extra_body": {"vllm_xargs": {"tooldec": "{not json"}}}, "not valid JSON"),
        ({"extra_body": {"vllm_xargs": {"tooldec": json.dumps({"tools": TOOLS, "tool_choice": "maybe"})}}},
         "tool_choice must be"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}}}]}, "uniqueItems"),
    ],
    ids=["json", "tool_choice", "unsupported-keyword"],
)
def test_vllm_bad_payload_is_a_400(client: Any, body: dict[str, Any], message: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError, match=message):
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=4, **body)
    ok = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert ok.choices[0].finish_reason == "length"


@pytest.mark.vllm
def test_vllm_offline_payload_through_vllm_xargs(client: Any) -> None:
    """Without the tooldec parser's help the client may send the payload itself; the processor guides it."""
    answer = client.chat.completions.create(
        model="smollm2", messages=[*FEW_SHOT, {"role": "user", "content": "Add 2 and 3."}], max_tokens=64,
        temperature=0, extra_body={"vllm_xargs": tool_payload(TOOLS, NAMED)},
    )
    text = answer.choices[0].message.content or ""
    assert text.startswith("<tool_call>\n") and "</tool_call>" in text, text
    check = SyntaxChecker(from_openai_tools(TOOLS), "hermes").classify(text[: text.index("</tool_call>") + 12])
    assert check.kind is None and check.call is not None and check.call.name == "add"


ARITH = 'start: expr\nexpr: expr "+" term | term\nterm: term "*" factor | factor\nfactor: "(" expr ")" | /[0-9]+/\n'


@pytest.mark.vllm
def test_vllm_grammar_payload_guides_the_whole_answer(client: Any) -> None:
    """`vllm_xargs={"tooldec_grammar": ...}`: the answer is a sentence of the grammar (lark parses it), streamed
    too; a grammar that cannot be read is a 400 naming its line."""
    import lark
    import openai

    from tooldec.integrations.batch import grammar_payload

    kwargs: dict[str, Any] = {"model": "smollm2", "max_tokens": 48, "temperature": 0,
                              "messages": [{"role": "user", "content": "What is 12 times 3 plus 4?"}]}
    answer = client.chat.completions.create(extra_body={"vllm_xargs": grammar_payload(ARITH)}, **kwargs)
    text = answer.choices[0].message.content or ""
    assert answer.choices[0].finish_reason == "stop", text  # greedy SmolLM2 writes 12*3+4
    lark.Lark(ARITH).parse(text)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        stream=True, extra_body={"vllm_xargs": grammar_payload(ARITH)}, **kwargs) if c.choices)
    assert streamed == text and text, text
    with pytest.raises(openai.BadRequestError, match="line 2"):
        client.chat.completions.create(extra_body={"vllm_xargs": grammar_payload('start: "a"\nb: (\n')}, **kwargs)


@pytest.mark.vllm
def test_vllm_output_payloads_guide_the_whole_answer(client: Any) -> None:
    """`vllm_xargs` with `output_payload("json" | "regex" | "choice", ...)`: the answer validates, matches or is
    one of the options; a schema or regex tooldec cannot guide is a 400 naming the problem."""
    import re

    import jsonschema
    import openai

    from tooldec.integrations.batch import output_payload

    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    kwargs: dict[str, Any] = {"model": "smollm2", "max_tokens": 48, "temperature": 0,
                              "messages": [{"role": "user", "content": "What is 12 times 3 plus 4?"}]}
    for key, value, ok in [
        ("json", schema, lambda t: jsonschema.validate(json.loads(t), schema) is None),
        ("regex", r"[0-9]{1,4}", lambda t: re.fullmatch(r"[0-9]{1,4}", t) is not None),
        ("choice", ["40", "48", "52"], lambda t: t in ("40", "48", "52")),
    ]:
        answer = client.chat.completions.create(extra_body={"vllm_xargs": output_payload(key, value)}, **kwargs)
        text = answer.choices[0].message.content or ""
        assert answer.choices[0].finish_reason == "stop" and ok(text), (key, text)
    for key, value, words in [("regex", "(?<=a)b", "lookaround"), ("json", {"type": "integer", "minimum": 3,
                              "maximum": 1}, "no value"), ("choice", [], "at least one option")]:
        with pytest.raises(openai.BadRequestError, match=words):
            # written by hand (output_payload would refuse it before the request): a schema travels as JSON text
            raw = json.dumps(value) if key == "json" else value
            client.chat.completions.create(extra_body={"vllm_xargs": {f"tooldec_{key}": raw}}, **kwargs)
