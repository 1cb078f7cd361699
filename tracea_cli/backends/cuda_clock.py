"""A `timing.Clock` made of CUDA events: the GPU's own timestamps around the work queued on one stream.

`stop()` waits for the end event, so the elapsed time covers exactly the work queued between `start()` and
`stop()` on that stream, not the host's launch overhead. CuPy is imported when a clock is made, never at import.
"""

from __future__ import annotations

from typing import Any


class CudaEventClock:
    """Times GPU work on `stream` (default: CuPy's current stream) in milliseconds."""

    def __init__(self, stream: Any | None = None) -> None:
        import cupy

        self._cupy = cupy
        self._stream = stream if stream is not None else cupy.cuda.get_current_stream()
        self._start = cupy.cuda.Event()
        self._end = cupy.cuda.Event()

    @property
    def stream(self) -> Any:
        return self._stream

    def start(self) -> None:
        self._start.record(self._stream)

    def stop(self) -> float:
        self._end.record(self._stream)
        self._end.synchronize()
        return float(self._cupy.cuda.get_elapsed_time(self._start, self._end))
