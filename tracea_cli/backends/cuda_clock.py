"""A `timing.Clock` made of CUDA events: the GPU's own timestamps around the work queued on one stream.

An event is stamped when the GPU reaches it. Were the GPU idle when `start()` records its event, the stamp would be
taken at once, and the region would also hold however long the host then takes to queue the work (Python, CuPy's
argument handling, a library's heuristics): microseconds that swamp a kernel of a few. So `start()` first queues a
kernel that holds the stream, spinning on a flag in pinned host memory; `stop()` queues the end event and only then
releases the flag. The region therefore covers exactly the GPU work queued between `start()` and `stop()`, played
back to back, never the host's launch overhead. (The hold gives up after `HOLD_TIMEOUT_NS`, so a host that dies
between the two calls cannot hang the GPU; `timed_out_holds` counts those, and such a sample may include host time.)
CuPy is imported when a clock is made, never at import.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

HOLD_TIMEOUT_NS = 100_000_000  # 100 ms

_HOLD_SOURCE = r"""
extern "C" __global__ void tracea_stream_hold(const volatile int *release, int *timed_out, unsigned long long timeout_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) { *timed_out += 1; return; }
#if __CUDA_ARCH__ >= 700
        __nanosleep(200);
#endif
    }
}
"""


@functools.lru_cache(maxsize=None)
def _hold_kernel(device: int) -> Any:
    """The hold kernel, compiled once per process and device (clocks are made per measurement)."""
    import cupy

    return cupy.RawKernel(_HOLD_SOURCE, "tracea_stream_hold")


class StreamHold:
    """Holds a stream (a spinning one-thread kernel) until `release()`: work queued behind it runs back to back."""

    def __init__(self, stream: Any) -> None:
        import cupy

        self._stream = stream
        self._kernel = _hold_kernel(cupy.cuda.Device().id)
        self._memory = cupy.cuda.alloc_pinned_memory(8)  # [release flag, timed-out count], seen by host and device
        self._flags = np.frombuffer(self._memory, dtype=np.int32, count=2)
        self._flags[:] = 0
        # pinned memory is mapped into the device's address space at the same address (unified addressing, which
        # every 64-bit platform CuPy supports has)
        self._device_ptr = self._memory.ptr

    @property
    def timed_out(self) -> int:
        """Holds that gave up waiting for their release."""
        return int(self._flags[1])

    def hold(self) -> None:
        self._flags[0] = 0
        self._kernel((1,), (1,), (np.uint64(self._device_ptr), np.uint64(self._device_ptr + 4),
                                  np.uint64(HOLD_TIMEOUT_NS)), stream=self._stream)

    def release(self) -> None:
        self._flags[0] = 1


class CudaEventClock:
    """Times GPU work on `stream` (default: CuPy's current stream) in milliseconds, without the host's launch time."""

    def __init__(self, stream: Any | None = None) -> None:
        import cupy

        self._cupy = cupy
        self._stream = stream if stream is not None else cupy.cuda.get_current_stream()
        self._start = cupy.cuda.Event()
        self._end = cupy.cuda.Event()
        self._hold = StreamHold(self._stream)

    @property
    def stream(self) -> Any:
        return self._stream

    @property
    def timed_out_holds(self) -> int:
        return self._hold.timed_out

    def start(self) -> None:
        self._hold.hold()
        self._start.record(self._stream)

    def stop(self) -> float:
        self._end.record(self._stream)
        self._hold.release()
        self._end.synchronize()
        return float(self._cupy.cuda.get_elapsed_time(self._start, self._end))
