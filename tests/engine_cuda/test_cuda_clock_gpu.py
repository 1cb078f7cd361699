"""On a GPU: the event clock times the GPU's work only, never the host's time to queue it.

Marked `gpu`; skipped with the reason where CuPy or a CUDA device is missing.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tracea_cli.stats import summarize
from tracea_cli.timing import TimingPolicy, measure

pytestmark = pytest.mark.gpu

POLICY = TimingPolicy(warmup=3, min_samples=20, max_samples=20, target_cv=0.0, max_seconds=10.0)
_WAIT = r"""
extern "C" __global__ void wait_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


@pytest.fixture(scope="module")
def wait_kernel(gpu_target):
    import cupy

    return cupy.RawKernel(_WAIT, "wait_ns")


def test_the_host_time_before_a_launch_is_not_timed(wait_kernel):
    """2 ms of host work before a 5 µs kernel, on an otherwise idle GPU: the samples hold the kernel, not the 2 ms."""
    from tracea_cli.backends.cuda_clock import CudaEventClock

    def slow_host_then_kernel():
        time.sleep(0.002)
        wait_kernel((1,), (1,), (np.uint64(5_000),))

    clock = CudaEventClock()
    median = summarize(measure(slow_host_then_kernel, clock=clock, policy=POLICY).times_ms).median
    assert 0.004 < median < 0.05, median
    assert clock.timed_out_holds == 0


def test_a_kernel_of_known_length_measures_its_length(wait_kernel):
    from tracea_cli.backends.cuda_clock import CudaEventClock

    def run():
        wait_kernel((1,), (1,), (np.uint64(200_000),))

    median = summarize(measure(run, clock=CudaEventClock(), policy=POLICY).times_ms).median
    assert median == pytest.approx(0.2, rel=0.1)
