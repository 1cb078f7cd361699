"""tune.setup: GPU jobs handed over as their compiles end, CPU jobs compiled in the worker, several GPUs of one kind."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tracea_cli.backends.base import Artifact, CompileFailed
from tracea_cli.doctor.profile import GpuInfo
from tracea_cli.errors import UsageError
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.target import Target
from tracea_cli.timing import TimingPolicy
from tracea_cli.tune import setup

SECONDS = {0: 1.5, 1: 0.1, 2: 0.6, 3: 0.3}  # compile time of configuration x


class SlowCompiler:
    def compile(self, problem, config, target):
        time.sleep(SECONDS[config["x"]])
        if config["x"] == 3:
            raise CompileFailed("error: x=3 does not compile")
        return Artifact(config=config, family="k", source="k", plan=LaunchPlan(steps=()), binary=b"cubin")


def test_gpu_jobs_come_fastest_compile_first_with_their_artifacts(monkeypatch):
    monkeypatch.setattr(setup.os, "cpu_count", lambda: 4)  # one compile thread per configuration, on any machine
    target = Target(backend="cuda", device_class="test", arch="sm_90")
    plan = setup.Plan(GemmProblem(64, 64, 64), target, (0,), SlowCompiler(), key=None)
    began = time.monotonic()
    arrivals = [(job, time.monotonic() - began) for job in setup.jobs(plan, [{"x": x} for x in range(4)], TimingPolicy(), seed=10)]
    assert [job.config["x"] for job, _ in arrivals] == [1, 3, 2, 0]
    assert arrivals[0][1] < 1.0  # the fastest is ready long before the slowest compile ends
    assert [job.job_id for job, _ in arrivals] == [11, 13, 12, 10] and all(job.seed == job.job_id for job, _ in arrivals)
    artifacts = {job.config["x"]: job.artifact for job, _ in arrivals}
    assert artifacts[3] is None  # a failed compile: the worker compiles again and records the failure
    assert all(artifacts[x].binary == b"cubin" for x in (0, 1, 2))


def test_cpu_jobs_are_compiled_in_the_worker():
    plan = setup.Plan(GemmProblem(64, 64, 64), Target(backend="cpu", device_class="test"), (None,), SlowCompiler(),
                      key=None)
    jobs = list(setup.jobs(plan, [{"x": 0}, {"x": 1}], TimingPolicy(), seed=0))
    assert [j.config["x"] for j in jobs] == [0, 1] and all(j.artifact is None for j in jobs)


def test_several_gpus_tune_together_only_when_they_are_the_same_kind():
    def gpu(i, kind):
        return GpuInfo(vendor="nvidia", name=kind, device_class=f"{kind} | sm_90 | 132 SMs", cuda_index=i)

    same = SimpleNamespace(cuda_gpus=(gpu(0, "NVIDIA H200"), gpu(1, "NVIDIA H200")))
    setup.check_one_device_class(same, (0, 1))
    mixed = SimpleNamespace(cuda_gpus=(gpu(0, "NVIDIA H200"), gpu(1, "NVIDIA H100")))
    setup.check_one_device_class(mixed, (1,))
    with pytest.raises(UsageError) as e:
        setup.check_one_device_class(mixed, (0, 1))
    assert "different kinds" in e.value.message and "H100" in e.value.message and e.value.exit_code == 2
