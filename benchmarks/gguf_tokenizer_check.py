"""The fast GGUF tokenizer (tooldec.backends.gguf_tokenizer) on a real model's file: equal to transformers', and
how much of the first run it saves.

`--check`: builds both tokenizers from the file (the embedded Qwen2.5-Coder by default; `--model` takes another
embedded name or a .gguf path) and compares them on `--strings` texts: chunks of this project's own sources and
docs (code and prose), the BFCL and FuncQA questions and function documents under `--shared` when there,
seeded random strings over many scripts with special tokens spliced in, and chat prompts rendered with tools.
Each text must encode the same (with and without special tokens) and its ids decode the same (with and without
skipping special tokens); random id sequences must decode the same; the tooldec Vocabulary must be the same, and
pass the check against llama.cpp's own token pieces. With `--llama` it also says how often llama.cpp's own
tokenizer (`llama_tokenize`, special tokens parsed) gives the same ids (informative: transformers' GGUF path is
the reference here).

`--run PAIRS`: README's first command, `tooldec run "What is 3.14 times 123?"`, end to end as its own
process with a fresh tooldec cache (the fetched models linked in: no tokenizer, no stored prompt prefix), before
(this module turned off: transformers' path) and after, alternating.

`--time PAIRS`: the first run's cost of `gguf_tokenizer` (tooldec's cache empty: a fresh `TOOLDEC_CACHE` per
run), before (main's path: transformers reads the file, the result is saved to the cache) and after (this
module), each in a fresh process, alternating, PAIRS pairs; prints each run's seconds and the load average.

    python benchmarks/gguf_tokenizer_check.py --check [--strings 3000] [--llama] [--shared ../shared]
    python benchmarks/gguf_tokenizer_check.py --time 3
    python benchmarks/gguf_tokenizer_check.py --run 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def model_path(spec: str) -> Path:
    from tooldec.backends.embedded import EMBEDDED_MODELS, fetch_model

    return fetch_model(spec, progress=True) if spec in EMBEDDED_MODELS else Path(spec)


def old_gguf_tokenizer(path: Path) -> Any:
    """main's gguf_tokenizer before this module, verbatim: transformers reads the file, the result is cached."""
    import transformers

    from tooldec.backends.cache import cache_dir
    from tooldec.backends.loader import gguf_key

    root = cache_dir("tokenizers")
    folder = root / gguf_key(path)
    if (folder / "tokenizer.json").is_file():
        return transformers.AutoTokenizer.from_pretrained(str(folder))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    partial = Path(tempfile.mkdtemp(dir=root, prefix=".partial-"))
    try:
        tokenizer.save_pretrained(str(partial))
        partial.rename(folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
    return tokenizer


def one(impl: str, path: Path) -> None:
    """Child process: import as `tooldec run` does, then time one first-run call of `impl`."""
    start = time.perf_counter()
    import transformers  # noqa: F401

    from tooldec.backends import llamacpp

    imported = time.perf_counter()
    tokenizer = (old_gguf_tokenizer if impl == "old" else llamacpp.gguf_tokenizer)(path)
    done = time.perf_counter()
    print(
        json.dumps(
            {
                "impl": impl,
                "import_s": imported - start,
                "call_s": done - imported,
                "class": type(tokenizer).__name__,
            }
        )
    )


def time_pairs(pairs: int, path: Path) -> None:
    rows = []
    for pair in range(pairs):
        for impl in ("old", "new") if pair % 2 == 0 else ("new", "old"):
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, TOOLDEC_CACHE=cache)
                load = os.getloadavg()[0]
                start = time.perf_counter()
                out = subprocess.run(
                    [sys.executable, __file__, "--one", impl, "--model", str(path)],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                wall = time.perf_counter() - start
                row = json.loads(out.stdout.strip().splitlines()[-1]) | {"process_s": wall, "load": load}
                rows.append(row)
                print(f"{impl}: gguf_tokenizer {row['call_s']:6.2f} s  (imports {row['import_s']:.2f} s, process "
                      f"{wall:.2f} s, load {load:.1f}, {row['class']})", flush=True)  # fmt: skip
    for impl in ("old", "new"):
        calls = sorted(r["call_s"] for r in rows if r["impl"] == impl)
        print(
            f"{impl}: median {calls[len(calls) // 2]:.2f} s of {len(calls)}: {', '.join(f'{c:.2f}' for c in calls)}"
        )


RUN_OLD = (  # `tooldec run` as main ran it: this module turned off, so gguf_tokenizer takes transformers' path
    "import sys; import tooldec.backends.llamacpp as m; m.fast_tokenizer = lambda path: None; "
    "from tooldec.cli import app; sys.argv = ['tooldec', *sys.argv[1:]]; app()"
)


def run_pairs(pairs: int, question: str) -> None:
    """README's first command (`tooldec run QUESTION`, the embedded default model already fetched) as a fresh
    process with a fresh tooldec cache but for the fetched models (linked in): no tokenizer, no stored prefix."""
    from tooldec.backends.cache import cache_dir

    models = cache_dir("models")
    for pair in range(pairs):
        for impl in ("old", "new") if pair % 2 == 0 else ("new", "old"):
            with tempfile.TemporaryDirectory() as cache:
                (Path(cache) / "models").symlink_to(models)
                env = dict(os.environ, TOOLDEC_CACHE=cache)
                command = (
                    [sys.executable, "-c", RUN_OLD]
                    if impl == "old"
                    else [sys.executable, "-m", "tooldec.cli"]
                )
                load = os.getloadavg()[0]
                start = time.perf_counter()
                out = subprocess.run(
                    [*command, "run", question], check=False, env=env, capture_output=True, text=True
                )
                wall = time.perf_counter() - start
                answer = [line for line in out.stdout.splitlines() if line.startswith("answer")]
                print(f"{impl}: tooldec run {wall:6.1f} s  (load {load:.1f}, exit {out.returncode}, "
                      f"{answer[-1] if answer else out.stderr[-300:]!r})", flush=True)  # fmt: skip


SPECIALS_EXTRA = ["'s", "'LL", "\r\n", "  \n", "1234567", "\t\t", "    "]
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " \t\r\n",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "àéîõüßçñøåæœÀÉÎÕÜ",
    "日本語中文漢字東京한국어",
    "Москваπλάσηعربيעבריתहिन्दी",
    "🙂👍🏽🚀✨\u200d\u0301\u00a0\ufeff\u2028",
]


def random_text(rng: random.Random, specials: list[str]) -> str:
    parts = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if kind < 0.15:
            parts.append(rng.choice(specials + SPECIALS_EXTRA))
        elif kind < 0.25:  # any code points of the first three planes, surrogates left out
            points = (rng.randint(1, 0x2FFFF) for _ in range(rng.randint(1, 6)))
            parts.append("".join(chr(p) for p in points if not 0xD800 <= p <= 0xDFFF))
        else:
            alphabet = "".join(rng.sample(ALPHABETS, rng.randint(1, 3)))
            parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))))
    return "".join(parts)


def texts(count: int, shared: Path, specials: list[str], seed: int) -> list[str]:
    rng = random.Random(seed)
    corpus: list[str] = []
    for pattern in ("README.md", "docs/*.md", "src/tooldec/**/*.py", "tests/*.py"):
        for file in sorted(ROOT.glob(pattern)):
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
            for i in range(0, len(lines), 4):
                corpus.append("".join(lines[i : i + rng.randint(1, 6)]))
    for file in sorted((shared / "data" / "bfcl").glob("BFCL_v4_*.json")):
        for line in file.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            corpus.append(json.dumps(record["question"], ensure_ascii=False))
            corpus.append(json.dumps(record["function"], ensure_ascii=False, indent=rng.choice([None, 2, 4])))
    for name in ("funcqa_oh.json", "funcqa_mh.json"):
        file = shared / "data" / "funcqa" / name
        if file.is_file():
            corpus += [
                json.dumps(q, ensure_ascii=False) for q in json.loads(file.read_text(encoding="utf-8"))
            ]
    picked = rng.sample(corpus, min(len(corpus), count * 2 // 3))
    picked += [random_text(rng, specials) for _ in range(count - len(picked))]
    return picked


def check(path: Path, count: int, shared: Path, seed: int, llama: bool) -> int:
    import transformers

    from tooldec.backends.gguf_tokenizer import fast_tokenizer
    from tooldec.vocab import Vocabulary

    start = time.perf_counter()
    fast = fast_tokenizer(path)
    built = time.perf_counter() - start
    if fast is None:
        print(
            f"{path.name}: not a tokenizer built by tooldec.backends.gguf_tokenizer (transformers' path is taken)"
        )
        return 0
    start = time.perf_counter()
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    print(
        f"built in {built:.2f} s; transformers' GGUF path {time.perf_counter() - start:.2f} s ({type(reference).__name__})"
    )
    failures: list[str] = []
    specials = list(reference.get_added_vocab())
    sample = texts(count, shared, specials, seed)
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "all_special_tokens", "chat_template",
                 "add_bos_token", "add_eos_token"):  # fmt: skip
        if getattr(fast, name) != getattr(reference, name):
            failures.append(f"attribute {name}")
    if fast.get_vocab() != reference.get_vocab():
        failures.append("get_vocab")
    tools = [{"type": "function", "function": {"name": "multiply", "description": "Multiply two numbers.",
              "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                             "required": ["a", "b"]}}}]  # fmt: skip
    chats = [
        [{"role": "user", "content": "What is 3.14 times 123?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": sample[0]},
         {"role": "assistant", "content": sample[1]}, {"role": "user", "content": sample[2]}],
    ]  # fmt: skip
    for messages in chats:
        for kwargs in ({}, {"tools": tools}):
            ours = fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
            if ours != reference.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **kwargs
            ):
                failures.append(f"chat template {kwargs and 'with tools'}")
            sample.append(ours)
    llama_same = llama_total = 0
    llama_differ: list[str] = []
    tokenize = llama_tokenizer(path) if llama else None
    for text in sample:
        for special in (False, True):
            ids = fast.encode(text, add_special_tokens=special)
            if ids != reference.encode(text, add_special_tokens=special):
                failures.append(f"encode {text!r} special={special}")
                continue
            for skip in (False, True):
                if fast.decode(ids, skip_special_tokens=skip) != reference.decode(
                    ids, skip_special_tokens=skip
                ):
                    failures.append(f"decode {ids} skip={skip}")
        if tokenize is not None:
            llama_total += 1
            theirs = tokenize(text)
            if theirs == fast.encode(text, add_special_tokens=False):
                llama_same += 1
            elif len(llama_differ) < 5:
                llama_differ.append(f"{text!r}: {fast.convert_ids_to_tokens(fast.encode(text))} vs llama.cpp "
                                    f"{fast.convert_ids_to_tokens(theirs)}")  # fmt: skip
    rng = random.Random(seed)
    for _ in range(count):
        ids = [rng.randrange(len(reference)) for _ in range(rng.randint(1, 16))]
        for skip in (False, True):
            if fast.decode(ids, skip_special_tokens=skip) != reference.decode(ids, skip_special_tokens=skip):
                failures.append(f"decode {ids} skip={skip}")
    ours_vocab, their_vocab = Vocabulary.from_hf(fast), Vocabulary.from_hf(reference)
    if (ours_vocab.token_bytes, ours_vocab.eos_ids, ours_vocab.special_ids) != (
        their_vocab.token_bytes, their_vocab.eos_ids, their_vocab.special_ids
    ):  # fmt: skip
        failures.append("Vocabulary.from_hf")
    if llama:
        from tooldec.backends.llama_context import LlamaContext
        from tooldec.backends.llamacpp import gguf_vocabulary

        # raises if any text token differs
        gguf_vocabulary(LlamaContext(path, n_ctx=256).token_pieces(), fast)
    print(f"{len(sample)} texts (encoded with and without special tokens, decoded with and without skipping), "
          f"{count} random id sequences, vocabulary of {len(fast)}: {len(failures)} differences")  # fmt: skip
    for failure in failures[:20]:
        print("  ", failure[:300])
    if llama_total:
        print(
            f"llama.cpp's own tokenizer gives the same ids on {llama_same} of {llama_total} texts; "
            "tooldec.backends.gguf_vocabulary's check against llama.cpp's pieces passed"
        )
        for differ in llama_differ:
            print("  ", differ[:400])
    return 1 if failures else 0


def llama_tokenizer(path: Path) -> Any:
    import ctypes

    import numpy as np

    from tooldec.backends.llama_context import LlamaContext

    context = LlamaContext(path, n_ctx=256)
    buffer = np.zeros(1 << 16, dtype=np.int32)

    def tokenize(text: str) -> list[int]:
        data = text.encode()
        n = context.api.llama_tokenize(
            context.vocab, data, len(data), buffer.ctypes.data_as(ctypes.c_void_p), len(buffer), False, True
        )
        return buffer[:n].tolist()

    tokenize.context = context  # type: ignore[attr-defined]
    return tokenize


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--strings", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shared", type=Path, default=Path(os.environ.get("TOOLDEC_SHARED", ROOT.parent / "shared"))
    )
    parser.add_argument("--llama", action="store_true", help="also compare with llama.cpp's own tokenizer")
    parser.add_argument("--time", type=int, default=0, metavar="PAIRS")
    parser.add_argument(
        "--run", type=int, default=0, metavar="PAIRS", help="README's first command, old vs new"
    )
    parser.add_argument("--question", default="What is 3.14 times 123?")
    parser.add_argument("--one", choices=["old", "new"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one, Path(args.model))
        return 0
    if args.run:
        run_pairs(args.run, args.question)
        return 0
    path = model_path(args.model)
    status = 0
    if args.check:
        status = check(path, args.strings, args.shared, args.seed, args.llama)
    if args.time:
        time_pairs(args.time, path)
    return status


if __name__ == "__main__":
    sys.exit(main())
