"""Progress a person can follow on a first run: one line per stage (fetch, verify, convert, load, answer).

While a stage runs, a live line shows its elapsed time, with a bar where its size is known (wheels fetched,
bytes checked); when it ends, one plain line stays: `  convert  qwen2.5-coder-0.5b to float32 ... 48.2 s`.
Third-party bars and warnings (pip's, transformers' "Loading weights", deprecation notices) are silenced in
that path by `quiet_libraries`, so only tooldec's lines are interleaved with the answer.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class Stage:
    """A running stage: `advance` moves its bar, `note` adds to its final line."""

    def __init__(self, progress: Progress | None, task: int | None) -> None:
        """A stage drawn on `progress` (None: silent)."""
        self._progress, self._task = progress, task
        self.notes: list[str] = []

    def advance(self, amount: float = 1) -> None:
        """Move the bar by `amount` units."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)  # type: ignore[arg-type]

    def note(self, text: str) -> None:
        """Say something more on the stage's final line."""
        self.notes.append(text)


class Stages:
    """Reports stages on stderr, one line each; `Stages(enabled=False)` reports nothing (library use)."""

    def __init__(self, *, enabled: bool = True, console: Console | None = None) -> None:
        """Lines go to `console` (default: stderr)."""
        self.enabled = enabled
        self.console = console or Console(stderr=True, highlight=False)

    @contextmanager
    def stage(self, name: str, what: str, total: float | None = None) -> Iterator[Stage]:
        """Run one stage: a live line (a bar if `total` is given) while inside, then its line with seconds."""
        start = time.perf_counter()
        if not self.enabled:
            yield Stage(None, None)
            return
        label = f"  {name:<8} {what}"
        if self.console.is_terminal:  # a live line; a log file gets the final line only
            columns = [TextColumn(label), BarColumn() if total else SpinnerColumn(), TimeElapsedColumn()]
            with Progress(*columns, console=self.console, transient=True) as progress:
                stage = Stage(progress, progress.add_task(name, total=total))
                yield stage
        else:
            stage = Stage(None, None)
            yield stage
        notes = f" ({', '.join(stage.notes)})" if stage.notes else ""
        self.console.print(
            f"{label}{notes} {time.perf_counter() - start:.1f} s", markup=False, soft_wrap=True
        )


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence transformers' and huggingface_hub's progress bars, info logs and warnings, then restore them."""
    with ExitStack() as restore, warnings.catch_warnings():
        for category in (FutureWarning, DeprecationWarning, UserWarning):
            warnings.simplefilter("ignore", category)
        hub = logging.getLogger("huggingface_hub")
        restore.callback(hub.setLevel, hub.level)
        hub.setLevel(logging.ERROR)
        try:
            import transformers.utils.logging as tf_logging
        except ImportError:
            yield
            return
        if tf_logging.is_progress_bar_enabled():
            restore.callback(tf_logging.enable_progress_bar)
        restore.callback(tf_logging.set_verbosity, tf_logging.get_verbosity())
        tf_logging.set_verbosity_error()
        tf_logging.disable_progress_bar()
        gguf_utils: Any = None
        try:  # the GGUF reader draws its own tqdm bar, whatever transformers' setting
            import transformers.modeling_gguf_pytorch_utils as gguf_utils
        except ImportError:
            pass
        if gguf_utils is not None and hasattr(gguf_utils, "tqdm"):
            restore.callback(setattr, gguf_utils, "tqdm", gguf_utils.tqdm)
            gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
        yield
