"""First-run progress: one plain line per stage that ran, third-party noise silenced and restored."""

from __future__ import annotations

import io
import re
import warnings

import pytest
from rich.console import Console

from tooldec.backends.progress import Stages, quiet_libraries


def test_one_line_per_stage_with_notes_and_seconds() -> None:
    out = io.StringIO()
    stages = Stages(console=Console(file=out, width=40))
    with stages.stage("fetch", "a model: 6 wheels from PyPI", total=6) as stage:
        for _ in range(6):
            stage.advance()
        stage.note("478 MB")
    with stages.stage("load", "a model (float32)"):
        pass
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # not wrapped at the console's width, no bar left behind in a log
    assert re.fullmatch(r"  fetch +a model: 6 wheels from PyPI \(478 MB\) \d+\.\d s", lines[0])
    assert lines[1].startswith("  load     a model (float32) ")


def test_disabled_stages_print_nothing() -> None:
    out = io.StringIO()
    with Stages(enabled=False, console=Console(file=out)).stage("convert", "x") as stage:
        stage.advance()
        stage.note("y")
    assert out.getvalue() == ""


def test_quiet_libraries_silences_and_restores() -> None:
    tf_logging = pytest.importorskip("transformers.utils.logging")
    tf_logging.set_verbosity_warning()
    tf_logging.enable_progress_bar()
    with quiet_libraries():
        assert tf_logging.get_verbosity() == tf_logging.ERROR
        assert not tf_logging.is_progress_bar_enabled()
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn("deprecated", FutureWarning, stacklevel=1)
        assert not caught
    assert tf_logging.get_verbosity() == tf_logging.WARNING
    assert tf_logging.is_progress_bar_enabled()
