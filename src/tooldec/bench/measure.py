"""Small measuring helpers: a clock in microseconds, median and p99 of samples, resident memory."""

from __future__ import annotations

import os
import time

import numpy as np

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def now_us() -> float:
    """A monotonic clock reading in microseconds."""
    return time.perf_counter_ns() / 1000.0


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
