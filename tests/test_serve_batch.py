"""Continuous batching (ContinuousBatch): rows that join and leave between steps get the tokens they get alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tooldec.compiler import Compiler
from tooldec.decoding import CallController, SamplingParams
from tooldec.decoding.decoder import ContinuousBatch, Decoder
from tooldec.specs import ToolSet, ToolSpec
from tooldec.toolsets import funcqa_tools

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
    },
)
TOOLS = ToolSet([*funcqa_tools(), WEATHER])


@pytest.fixture(scope="module")
def setup(bytelevel_vocab, tiny_llama):  # type: ignore[no-untyped-def]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 32-wide model: more threads only contend on a shared machine
    model = tiny_llama(bytelevel_vocab.size)
    grammar = Compiler(bytelevel_vocab).compile(TOOLS, "hermes")
    yield Decoder(model, bytelevel_vocab), grammar
    torch.set_num_threads(threads)


def _alone(decoder: Decoder, grammar, prompt: list[int], params: SamplingParams, limit: int):  # type: ignore[no-untyped-def]
    """The row decoded by Decoder.generate on its own."""
    return decoder.generate([prompt], [CallController(grammar)], params, max_new_tokens=limit)[0]


def _run(batch: ContinuousBatch, grammar, schedule: dict[int, list], limit: int = 400) -> list:  # type: ignore[no-untyped-def, type-arg]
    """Step the batch, adding schedule[step] before that step; returns the rows in their order of addition."""
    rows = []
    step = 0
    while len(batch) or any(s >= step for s in schedule):
        for prompt, params, max_tokens in schedule.get(step, []):
            rows.append(batch.add(prompt, CallController(grammar), params, max_new_tokens=max_tokens))
        batch.step()
        step += 1
        assert step < limit
    return rows


def test_rows_joining_between_steps_get_their_tokens_alone(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    greedy = SamplingParams()
    long_prompt = enc("a much longer prompt that has many more tokens than the others do, " * 3)
    schedule = {
        0: [(enc("a"), greedy, 300), (enc("b c"), SamplingParams(temperature=1.0, seed=3), 300)],
        2: [(long_prompt, greedy, 300)],  # longer than the batch's cache: every row is left-padded
        5: [(enc("x"), greedy, 12)],  # a short budget: it leaves early ("length")
        6: [(enc("hello there"), SamplingParams(temperature=0.7, top_p=0.9, seed=11), 300)],
    }
    rows = _run(ContinuousBatch(decoder), grammar, schedule)
    flat = [item for step in sorted(schedule) for item in schedule[step]]
    for i, (prompt, params, limit) in enumerate(flat):
        row, alone = rows[i], _alone(decoder, grammar, prompt, params, limit)
        assert row.finished and row.error is None
        assert row.gen.tokens == alone.tokens, i
        assert row.gen.finish_reason == alone.finish_reason
        assert [e.calls for e in row.gen.events] == [e.calls for e in alone.events]
    assert rows[3].gen.finish_reason == "length"


def test_a_removed_row_leaves_the_others_unchanged(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    batch = ContinuousBatch(decoder)
    prompts = [enc("first prompt"), enc("a second, longer prompt"), enc("3")]
    rows = [batch.add(p, CallController(grammar), max_new_tokens=300) for p in prompts]
    batch.step()
    batch.step()
    batch.remove(rows[1])
    seen = []
    while len(batch):
        seen += batch.step()
    assert rows[1] not in seen and rows[1].finished
    for i in (0, 2):
        assert rows[i].gen.tokens == _alone(decoder, grammar, prompts[i], SamplingParams(), 300).tokens
    assert batch._cache is None  # every slot freed once the batch is empty


def test_old_positions_are_dropped_when_no_row_needs_them(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    batch = ContinuousBatch(decoder)
    long_prompt = enc("a long prompt that will leave the batch early, " * 12)
    short = enc("short")
    leaving = batch.add(long_prompt, CallController(grammar), max_new_tokens=2)
    staying = batch.add(short, CallController(grammar), max_new_tokens=300)
    widths = []
    while len(batch):
        batch.step()
        if batch._attention is not None:
            widths.append(batch._attention.shape[1])
    assert leaving.gen.finish_reason == "length"
    assert min(widths) < len(long_prompt)  # the long prompt's positions were dropped
    assert staying.gen.tokens == _alone(decoder, grammar, short, SamplingParams(), 300).tokens


def test_a_failing_row_ends_alone(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    batch = ContinuousBatch(decoder)

    def boom(token: int, event: object) -> None:
        raise RuntimeError("client callback failed")

    bad = batch.add(enc("a"), CallController(grammar), on_token=boom)
    good = batch.add(enc("b"), CallController(grammar), max_new_tokens=300)
    finished = []
    while len(batch):
        finished += batch.step()
    assert bad in finished and bad.gen.finish_reason == "error" and "client callback failed" in (bad.error or "")
    assert good.gen.tokens == _alone(decoder, grammar, enc("b"), SamplingParams(), 300).tokens


def test_joining_prompts_reuse_a_kept_prefix(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    """Prompts that start like an earlier one (a shared system message) take those positions from its kept
    cache, in a join that mixes rows with and without a reuse, and still decode as they do alone."""
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    system = enc("You may call tools. Here are the tools and some examples of calls and of their answers. " * 2)
    batch = ContinuousBatch(decoder, min_prefix=16)
    first = batch.add(system + enc(" first question"), CallController(grammar), max_new_tokens=300)
    batch.step()
    prompts = [system + enc(" a second, longer question"), enc("unrelated"), system[:20] + enc(" short")]
    rows = [batch.add(p, CallController(grammar), max_new_tokens=300) for p in prompts]
    while len(batch):
        batch.step()
    def common(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b) - 1) and a[n] == b[n]:
            n += 1
        return n if n >= 16 else 0

    head = system + enc(" first question")
    assert first.gen.prefix_tokens == 0
    assert [r.gen.prefix_tokens for r in rows] == [common(head, p) for p in prompts]
    assert rows[0].gen.prefix_tokens >= len(system) and rows[2].gen.prefix_tokens >= 20
    for prompt, row in zip([system + enc(" first question"), *prompts], [first, *rows], strict=True):
        assert row.gen.tokens == _alone(decoder, grammar, prompt, SamplingParams(), 300).tokens
    assert len(batch._prefixes) == 3  # the three long prompts are kept; "unrelated" is too short


def test_prompts_joining_together_share_their_common_start(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    system = enc("You may call tools. Here are the tools and some examples of calls and of their answers. " * 2)
    prompts = [system + enc(q) for q in (" one", " two, a longer one", " 3")]
    batch = ContinuousBatch(decoder, min_prefix=16)
    rows = [batch.add(p, CallController(grammar), max_new_tokens=300) for p in prompts]
    while len(batch):
        batch.step()
    assert all(r.gen.prefix_tokens >= len(system) - 1 for r in rows)
    for prompt, row in zip(prompts, rows, strict=True):
        assert row.gen.tokens == _alone(decoder, grammar, prompt, SamplingParams(), 300).tokens


def test_rows_read_the_prefix_they_share_once_and_copy_what_they_stop_sharing(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    """Under shared-prefix attention the batch keeps the positions all its rows share once; a joiner that
    shares fewer has the rest copied into the live rows' caches, and every row still decodes as it does alone."""
    decoder, grammar = setup
    assert decoder.shares_prefix
    enc = bytelevel_vocab.encode
    system = enc("You may call tools. Here are the tools and some examples of calls and of their answers. " * 2)
    batch = ContinuousBatch(decoder, min_prefix=16)
    prompts: list[list[int]] = []
    rows = []

    def join(prompt: list[int]) -> None:
        prompts.append(prompt)
        rows.append(batch.add(prompt, CallController(grammar), max_new_tokens=300))
        batch.step()
        assert all(not r.finished for r in rows), "every row is still live when the next one joins"

    join(system + enc(" one"))
    assert batch._shared is None  # nothing kept yet: the first prompt is run whole, then kept
    batch.remove(rows[0])
    batch.step()
    prompts.pop(), rows.pop()
    join(system + enc(" two, a longer one"))
    shared = len(batch._shared.tokens) if batch._shared is not None else 0
    assert shared >= len(system)
    assert batch._cache is not None and batch._cache.slots[0].keys.shape[-2] < 16  # only its own positions
    join(system + enc(" three"))
    assert batch._shared is not None and len(batch._shared.tokens) >= len(system)
    join(system[:20] + enc(" short"))
    same = next(i for i, (a, b) in enumerate(zip(prompts[-1], system, strict=False)) if a != b)
    assert same >= 20 and batch._shared is not None and len(batch._shared.tokens) == same
    join(enc("an unrelated question"))
    assert batch._shared is None
    while len(batch):
        batch.step()
    for prompt, row in zip(prompts, rows, strict=True):
        assert row.error is None
        assert row.gen.tokens == _alone(decoder, grammar, prompt, SamplingParams(), 300).tokens
    assert [r.gen.prefix_tokens >= len(system) for r in rows] == [True, True, False, False]


def test_feed_width_pads_little() -> None:
    from tooldec.decoding.decoder import feed_width

    assert feed_width([12]) == 12  # alone: the whole forced stretch in one pass
    assert feed_width([1] * 31 + [20]) == 1  # one long stretch does not make 31 rows compute 20 positions
    assert feed_width([1, 1, 6, 6, 6, 6, 6, 6]) == 6
    assert feed_width([3, 3]) == 3


def test_a_long_forced_stretch_is_fed_over_steps_in_a_large_batch(setup, bytelevel_vocab) -> None:  # type: ignore[no-untyped-def]
    decoder, grammar = setup
    enc = bytelevel_vocab.encode
    batch = ContinuousBatch(decoder)
    prompts = [enc(f"prompt {i}") for i in range(12)]
    required = [CallController(grammar, trigger="<tool_call>", tool_choice="required") for _ in prompts[:2]]
    rows = [batch.add(p, c, max_new_tokens=200) for p, c in zip(prompts[:2], required, strict=True)]
    rows += [batch.add(p, CallController(grammar), max_new_tokens=200) for p in prompts[2:]]
    widths = []
    while len(batch):
        if batch.rows:
            widths.append(max(len(r.pending) for r in batch.rows))
        batch.step()
    assert max(widths) > 1  # some row had a stretch to feed
    for prompt, row, ctrl in zip(prompts, rows, [*required, *[None] * 10], strict=True):
        fresh = CallController(grammar, trigger="<tool_call>", tool_choice="required") if ctrl else CallController(grammar)
        alone = decoder.generate([prompt], [fresh], max_new_tokens=200)[0]
        assert row.gen.tokens == alone.tokens
