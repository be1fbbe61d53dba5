"""Small measuring helpers: a clock in microseconds, median and p99 of samples, resident memory."""

from __future__ import annotations

import os
import time

import numpy as np

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}
"""wall: elapsed time. cpu: this process's CPU time (all its threads), which other jobs on a shared machine do
not inflate: a step preempted for 10 ms reads as what it computed. Each reading costs ~0.3 us more than wall."""
_clock = CLOCKS["wall"]


def use_clock(kind: str) -> None:
    """Make `now_us` read the clock `kind` (a key of CLOCKS) from now on."""
    global _clock
    if kind not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {kind!r}")
    _clock = CLOCKS[kind]


def now_us() -> float:
    """A reading of the chosen clock (`use_clock`; wall by default) in microseconds."""
    return _clock() / 1000.0


def median(samples: list[float]) -> float | None:
    """Median of `samples` (None if there are none)."""
    return float(np.median(samples)) if samples else None


def p99(samples: list[float]) -> float | None:
    """99th percentile of `samples`, linear interpolation (None if there are none)."""
    return float(np.percentile(samples, 99)) if samples else None


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; 0 elsewhere), native allocations included."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except OSError:
        return 0
