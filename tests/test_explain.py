"""Diagnostics: for every guided step, the probability mass the mask removed and the token the model preferred."""

from __future__ import annotations

import torch

from tooldec.agents.explain import describe, guided_steps, summarize
from tooldec.compiler import Compiler
from tooldec.decoding import CallController, FreeController
from tooldec.decoding.decoder import Decoder
from tooldec.specs import ToolSpec
from tooldec.vocab import Vocabulary

TOOLS = [ToolSpec(n, "", {"type": "object", "properties": {"x": {"type": "integer", "maximum": 99}}, "required": ["x"]})
         for n in ("get_weather", "get_time")]


def test_explain_records_the_mass_each_guided_step_removed(bytelevel_vocab: Vocabulary, tiny_llama) -> None:  # type: ignore[no-untyped-def]
    vocab = bytelevel_vocab
    model = tiny_llama(vocab.size, seed=3)
    grammar = Compiler(vocab).compile(TOOLS, "json")
    prompt = [vocab.encode("call a tool")]
    plain = Decoder(model, vocab).generate(prompt, [CallController(grammar)], max_new_tokens=40, jump_forward=False)[0]
    gen = Decoder(model, vocab).generate(prompt, [CallController(grammar)], max_new_tokens=40, jump_forward=False,
                                         explain=True)[0]
    assert gen.tokens == plain.tokens and "guided_steps" not in plain.extra  # explaining changes nothing
    steps = guided_steps(gen.extra["guided_steps"])
    assert steps and all(0.0 <= s.removed <= 1.0 for s in steps)
    assert [s.chosen for s in steps] == [gen.tokens[s.position] for s in steps]
    # a random model puts most of its mass outside a tool call: each step's removed mass is what the mask banned
    with torch.inference_mode():
        first = torch.softmax(model(torch.tensor(prompt)).logits[0, -1].float(), -1)
    allowed = set(grammar.guide().allowed_token_ids().tolist())
    banned_mass = float(sum(p for t, p in enumerate(first.tolist()) if t not in allowed))
    assert abs(steps[0].removed - banned_mass) < 1e-4 and steps[0].position == 0
    assert steps[0].overridden == (int(first.argmax()) not in allowed)
    summary = summarize(steps, vocab)
    assert summary["guided_steps"] == len(steps) and summary["overrides"] == sum(s.overridden for s in steps)
    assert abs(summary["removed_sum"] - sum(s.removed for s in steps)) < 1e-5
    assert summary["removed_max"] == round(max(s.removed for s in steps), 6)
    assert len(describe(summary)) == 1 + len(summary["where"])
    # free decoding bans nothing: no step is recorded
    free = Decoder(model, vocab).generate(prompt, [FreeController(vocab, None)], max_new_tokens=5, explain=True)[0]
    assert "guided_steps" not in free.extra
