"""A small real backend for engine tests: GEMM as numpy products over `split` chunks of K (1, 2 or 4).

Built like `backends.op_backend.OpBackend` (op name, backend name), checked against the float64 reference and timed
with the host clock like a real backend, so the live engine, the tuning driver, the cache and the workers run for
real without depending on the numba kernels.
"""

from __future__ import annotations

import numpy as np

from tracea_cli.backends.base import Artifact, Evaluation, Status
from tracea_cli.ops.gemm.problem import make_inputs, reference
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.ops.verify import check
from tracea_cli.space import Param, SearchSpace
from tracea_cli.timing import HostClock, measure

NP = {"fp32": np.float32, "fp64": np.float64}


def _operands(problem, seed):
    inputs = make_inputs(problem, np.random.default_rng(seed))
    a = np.ascontiguousarray(inputs["A"], dtype=NP[problem.dtype])
    b = np.ascontiguousarray(inputs["B"], dtype=NP[problem.dtype])
    return a, (b if problem.layout == "nn" else b.T), reference(problem, inputs)["C"]


class NumpyBackend:
    def __init__(self, op_name: str, name: str) -> None:
        self.op_name, self.name = op_name, name

    def suggested(self, problem, target):
        return []

    def space(self, problem, target):
        return SearchSpace(params=(Param("split", (1, 2, 4)),))

    def source_hash(self, problem):
        return "numpy-split-v1"

    def compile(self, problem, config, target):
        return Artifact(config=dict(config), family="numpy_split", source="a @ b by K chunks", plan=LaunchPlan(steps=()))

    def evaluate(self, artifact, problem, target, *, policy, seed):
        a, b, ref = _operands(problem, seed)
        split = int(artifact.config["split"])
        bounds = np.linspace(0, problem.k, split + 1).astype(int)

        def run():
            out = np.zeros((problem.m, problem.n), dtype=a.dtype)
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                out += a[:, lo:hi] @ b[lo:hi, :]
            return out

        verdict = check(run().astype(np.float64), ref, problem.dtype)
        if not verdict.ok:
            return Evaluation(Status.WRONG_RESULT, reason=verdict.reason, rel_error=verdict.rel_error)
        return Evaluation(Status.OK, samples=measure(run, clock=HostClock(), policy=policy), rel_error=verdict.rel_error)

    def baseline(self, problem, target, *, policy, seed, name="auto"):
        a, b, ref = _operands(problem, seed)
        verdict = check((a @ b).astype(np.float64), ref, problem.dtype)
        return "numpy", Evaluation(Status.OK, samples=measure(lambda: a @ b, clock=HostClock(), policy=policy), rel_error=verdict.rel_error)
