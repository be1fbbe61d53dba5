"""The mask path and guided decoding with the model and its logits on a GPU (skipped without CUDA).

The compiled kernel applies masks to float32 CPU logits; logits on a GPU (or in another dtype) go through torch's
own ops on their device, and the decoder keeps the model's device. These tests check both against the CPU path.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tool_fixtures import TOOLS, check_sampled_calls

from tooldec.compiler import Compiler
from tooldec.decoding import CallController
from tooldec.decoding.logits_processor import ToolDecLogitsProcessor
from tooldec.decoding.sampling import apply_token_bitmask_inplace
from tooldec.grammar.calls import FORMATS


@pytest.fixture(scope="module")
def gpu_model(vocab, tiny_llama) -> object:  # type: ignore[no-untyped-def]
    return tiny_llama(vocab.size).to("cuda")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows", [None, [0, 2]])
def test_a_bitmask_on_gpu_logits_masks_what_the_cpu_kernel_masks(dtype: str, rows: list[int] | None) -> None:
    gen = np.random.default_rng(7)
    batch, width = 4, 1000
    words = (width + 31) // 32
    bitmask = gen.integers(-(2**31), 2**31, size=(batch, words), dtype=np.int64).astype(np.int32)
    logits = torch.from_numpy(gen.standard_normal((batch, width), dtype=np.float32))
    on_cpu = logits.clone()
    apply_token_bitmask_inplace(on_cpu, bitmask, rows)  # the compiled kernel
    for mask in (bitmask, torch.from_numpy(bitmask).to("cuda")):
        on_gpu = logits.to(device="cuda", dtype=getattr(torch, dtype))
        apply_token_bitmask_inplace(on_gpu, mask, rows)
        back = on_gpu.float().cpu()
        assert torch.equal(torch.isneginf(back), torch.isneginf(on_cpu))
        kept = ~torch.isneginf(on_cpu)
        assert torch.equal(back[kept], logits.to(getattr(torch, dtype)).float()[kept])


def test_gpu_logits_are_masked_by_one_triton_kernel_where_triton_is_installed() -> None:
    pytest.importorskip("triton")
    from tooldec.decoding.gpu_apply import _kernel, apply_on_gpu

    assert _kernel() is not None
    logits = torch.zeros((3, 70), device="cuda", dtype=torch.bfloat16)
    mask = torch.tensor([[1, 0, 0], [-1, -1, 0], [0, 0, 0]], dtype=torch.int32, device="cuda")  # reach: 96 columns
    assert apply_on_gpu(logits, mask, [0, 1])
    kept = ~torch.isneginf(logits.float().cpu())
    assert kept[0].nonzero().flatten().tolist() == [0]
    assert kept[1].nonzero().flatten().tolist() == list(range(64))
    assert kept[2].all()  # not a listed row: untouched


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_guided_decoding_on_a_gpu_writes_valid_calls(vocab, gpu_model, fmt: str) -> None:  # type: ignore[no-untyped-def]
    check_sampled_calls(gpu_model, vocab, fmt, seeds=2)


def test_the_hf_logits_processor_guides_generate_on_a_gpu(vocab, gpu_model) -> None:  # type: ignore[no-untyped-def]
    grammar = Compiler(vocab).compile(TOOLS, "json")
    eos = min(vocab.eos_ids)
    for seed in range(2):
        torch.manual_seed(seed)
        ctrl = CallController(grammar)
        prompt = torch.tensor([vocab.encode("call:")], device="cuda")
        out = gpu_model.generate(  # type: ignore[attr-defined]
            prompt, attention_mask=torch.ones_like(prompt), logits_processor=[ToolDecLogitsProcessor([ctrl])],
            do_sample=True, max_new_tokens=400, eos_token_id=eos, pad_token_id=eos,
        )
        text = vocab.decode(t for t in out[0, prompt.shape[1]:].tolist() if t not in vocab.eos_ids)
        call = json.loads(text)
        jsonschema.validate(call["arguments"], TOOLS[call["name"]].parameters)
