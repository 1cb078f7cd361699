"""Host time of one call, for the scripts that time the Python API's per-call overhead (not a script).

A loop of calls that queue GPU work measures whichever is slower, the host or the GPU: once the launch queue is full
each call waits for the GPU. So each call here is timed alone, after `drain` emptied the queue, and the median of
those times is the host's cost of the call."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def host_us(drain: Callable[[], object], fn: Callable[[], object], n: int = 2000, warmup: int = 50) -> float:
    """The median host time of `fn` in µs over `n` calls, each made after `drain` emptied the GPU's queue."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(n):
        drain()
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    drain()
    return statistics.median(times) * 1e6
