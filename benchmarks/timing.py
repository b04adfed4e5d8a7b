"""What every benchmark here shares: best-of-n wall-clock timing and the machine line.

Benchmarks run as scripts (`python benchmarks/bench_x.py`), so this module is imported from the
script's own folder (`from timing import best_of`)."""
from __future__ import annotations

import platform
import time

import numpy as np


def best_of(repeats: int, fn):
    """(the smallest wall-clock seconds of `repeats` calls of `fn`, the last call's value)."""
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def machine_line() -> str:
    return f"python {platform.python_version()} on {platform.machine()}, numpy {np.__version__}"
