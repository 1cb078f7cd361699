"""A CUDA backend whose kernels misbehave on purpose, for the tuner's GPU fault-injection test.

Configuration `x`: 0 and 1 correct (y = 2·a), 2 writes far out of bounds (illegal address), 3 never returns (endless
loop), 4 returns a wrong result. Compiled with NVRTC like real kernels, launched through CuPy.
"""

from __future__ import annotations

import numpy as np

from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import Artifact, Evaluation, Status
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.space import Param, SearchSpace
from tracea_cli.timing import TimingPolicy, measure

N = 1 << 20
BODY = {
    0: "y[i] = 2.0f * a[i];",
    1: "y[i] = a[i] + a[i];",
    2: "y[i + (1ll << 40)] = 2.0f * a[i];",
    # spins on a volatile read of the input, which never changes and is never NaN: the compiler cannot drop the loop
    3: "const volatile float* v = a; while (v[0] == v[0]) { } y[i] = 2.0f * a[i];",
    4: "y[i] = 3.0f * a[i];",
}


class FaultyCudaBackend:
    """Built like backends.op_backend.OpBackend (op name, backend name), so the planner can make it."""

    def __init__(self, op_name: str = "gemm", name: str = "cuda") -> None:
        self.op_name, self.name = op_name, name

    def space(self, problem, target):
        return SearchSpace(params=(Param("x", tuple(BODY)),))

    def source_hash(self, problem):
        return "faulty-cuda-v1"

    def suggested(self, problem, target):
        return []

    def config_in(self, problem, config):
        return config

    def compile(self, problem, config, target):
        src = ('extern "C" __global__ void k(const float* a, float* y, long long n) {'
               ' long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < n) { '
               + BODY[config["x"]] + " } }")
        prog = nvrtc.compile_source(src, nvrtc.CompileOptions(arch=target.arch or "sm_90"))
        return Artifact(config=config, family="faulty", source=src, plan=LaunchPlan(steps=()), binary=prog.cubin)

    def evaluate(self, artifact, problem, target, *, policy: TimingPolicy, seed):
        import cupy

        from tracea_cli.backends.cuda_clock import CudaEventClock

        try:
            from cupy.cuda import function

            module = function.Module()
            module.load(bytes(artifact.binary))  # a cubin, loaded as the engine loads its kernels
            kernel = module.get_function("k")
            a = cupy.asarray(np.random.default_rng(seed).uniform(-1, 1, N).astype(np.float32))
            y = cupy.full(N, np.nan, dtype=cupy.float32)

            def run():
                kernel(((N + 255) // 256,), (256,), (a, y, np.int64(N)))

            run()
            cupy.cuda.get_current_stream().synchronize()
        except Exception as e:
            return Evaluation(Status.LAUNCH_ERROR, reason=f"{type(e).__name__}: {e}")
        err = float(cupy.linalg.norm(y - 2 * a) / cupy.linalg.norm(2 * a))
        if not err <= 1e-6:
            return Evaluation(Status.WRONG_RESULT, reason=f"relative error {err:.3g}", rel_error=err)
        return Evaluation(Status.OK, samples=measure(run, clock=CudaEventClock(), policy=policy), rel_error=err)

    def baseline(self, problem, target, *, policy, seed, name="auto"):
        import cupy

        from tracea_cli.backends.cuda_clock import CudaEventClock

        a = cupy.ones(N, dtype=cupy.float32)
        return "cupy", Evaluation(Status.OK, samples=measure(lambda: cupy.multiply(a, 2, out=a), clock=CudaEventClock(), policy=policy))
