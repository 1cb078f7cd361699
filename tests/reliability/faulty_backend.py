"""A backend whose candidates misbehave on purpose: hang, crash the worker, return wrong results, fail to compile.

Used by the fault-injection tests of the worker pool and the tuning driver. Configuration parameter `x`:
0..3 good (time = 1 + x ms), 4 hangs, 5 kills its process, 6 returns a wrong result, 7 fails to compile; outside the
space, 8 reports a launch error (after which a worker must not be reused: its CUDA context may be gone) and 9 is
killed from outside (SIGKILL, as the kernel's OOM killer or a user would). `OneFaultBackend` searches {0, 1, F} with F
the fault named by the environment variable TRACEA_TEST_FAULT.
"""

from __future__ import annotations

import os
import signal
import time

from tracea_cli.backends.base import Artifact, CompileFailed, Evaluation, Status
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.space import Param, SearchSpace
from tracea_cli.timing import Samples


class FaultyBackend:
    """Built like backends.op_backend.OpBackend (op name, backend name), so the planner can make it."""

    def __init__(self, op_name: str = "gemm", name: str = "cpu") -> None:
        self.op_name, self.name = op_name, name

    def suggested(self, problem, target):
        return []

    def space(self, problem, target):
        return SearchSpace(params=(Param("x", tuple(range(8))),))

    def source_hash(self, problem):
        return "faulty-v1"

    def compile(self, problem, config, target):
        if config["x"] == 7:
            raise CompileFailed("error: x=7 does not compile")
        return Artifact(config=config, family="faulty", source="x", plan=LaunchPlan(steps=()))

    def evaluate(self, artifact, problem, target, *, policy, seed):
        x = artifact.config["x"]
        if x == 4:
            time.sleep(3600)
        if x == 5:
            os._exit(3)
        if x == 9:
            os.kill(os.getpid(), signal.SIGKILL)
        if x == 8:
            return Evaluation(Status.LAUNCH_ERROR, reason="CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")
        if x == 6:
            return Evaluation(Status.WRONG_RESULT, reason="relative error 0.5 exceeds the fp32 bound 1e-05", rel_error=0.5)
        t = 1.0 + x
        return Evaluation(Status.OK, samples=Samples(times_ms=(t, t, t), throttled=(False,) * 3, wall_s=0.0), rel_error=0.0)

    def baseline(self, problem, target, *, policy, seed, name="auto"):
        return "reference", Evaluation(Status.OK, samples=Samples(times_ms=(2.5,) * 3, throttled=(False,) * 3, wall_s=0.0))


class BrokenBaselineBackend(FaultyBackend):
    """Candidates as above, but the vendor baseline fails."""

    def baseline(self, problem, target, *, policy, seed, name="auto"):
        return "reference", Evaluation(Status.LAUNCH_ERROR, reason="the vendor library is not installed")


class SlowBackend(FaultyBackend):
    """Candidates as above, each good one taking half a second (so that several workers share the work)."""

    def evaluate(self, artifact, problem, target, *, policy, seed):
        time.sleep(0.5)
        return super().evaluate(artifact, problem, target, policy=policy, seed=seed)


#: the faults OneFaultBackend can put beside two good candidates, by the name the tests use
FAULTS = {"hang": 4, "crash": 5, "wrong result": 6, "compile failure": 7, "launch failure": 8, "killed worker": 9}


class OneFaultBackend(FaultyBackend):
    """Two good candidates (x = 0, 1) and the fault named by TRACEA_TEST_FAULT."""

    def space(self, problem, target):
        return SearchSpace(params=(Param("x", (0, 1, FAULTS[os.environ["TRACEA_TEST_FAULT"]])),))
