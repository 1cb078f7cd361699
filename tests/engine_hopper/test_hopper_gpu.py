"""The wgmma family on a Hopper GPU: results match the float64 reference over awkward shapes, and a wrong kernel is
caught by the check before anything is timed. Skipped, with the reason, without CuPy, cuda.bindings or an sm_90 GPU."""

from __future__ import annotations

import pytest

from tracea_cli.backends import cuda_hopper as ch
from tracea_cli.backends.archs import limits_for
from tracea_cli.backends.base import Status, Target
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.timing import TimingPolicy

pytestmark = pytest.mark.gpu

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"), device_index=0)
ONE_SAMPLE = TimingPolicy(warmup=1, min_samples=1, max_samples=2, max_seconds=0.1)


def cfg(tm, tn, stages, consumers=2, cluster=1, persistent=1, group=1, store="direct", schedule="cooperative"):
    return {"family": "wgmma", "tile_m": tm, "tile_n": tn, "stages": stages, "consumers": consumers,
            "schedule": schedule, "cluster_m": cluster, "persistent": persistent, "group_m": group, "store": store}


@pytest.fixture(scope="module", autouse=True)
def hopper_gpu():
    reason = ch._gpu_ready()
    if reason:
        pytest.skip(reason)


CASES = [
    (GemmProblem(1000, 3000, 776, "bf16", "nn"), cfg(128, 256, 4, cluster=2, group=4)),
    (GemmProblem(1000, 3000, 776, "fp16", "nt", "bias_silu"), cfg(128, 256, 3, store="tma", group=4)),
    (GemmProblem(200, 136, 72, "fp16", "nn", "bias_relu"), cfg(128, 128, 2, consumers=1, persistent=0)),
    (GemmProblem(600, 1024, 512, "bf16", "nt", "bias_residual"), cfg(256, 128, 3, cluster=2, store="tma")),
    (GemmProblem(16, 4096, 1024, "fp16", "nn"), cfg(64, 64, 6, consumers=1)),
    (GemmProblem(520, 392, 264, "tf32", "nt", "bias"), cfg(128, 128, 4, group=4)),
    (GemmProblem(1000, 3000, 776, "bf16", "nn", "bias_gelu"), cfg(128, 128, 4, store="tma", schedule="pingpong", group=4)),
    (GemmProblem(600, 1024, 512, "fp16", "nt"), cfg(64, 256, 4, cluster=2, schedule="pingpong")),
]


@pytest.mark.parametrize("problem,config", CASES, ids=[p.label for p, _ in CASES])
def test_results_match_the_float64_reference(problem, config):
    artifact = ch.compile_config(problem, config, H200)
    evaluation = ch.HopperBackend().evaluate(artifact, problem, H200, policy=ONE_SAMPLE, seed=3)
    assert evaluation.status is Status.OK, evaluation.reason
    assert evaluation.rel_error <= get_dtype(problem.dtype).bound
    assert evaluation.samples is not None and evaluation.samples.n >= 1


def test_a_kernel_computing_the_wrong_product_is_caught():
    # Built for B given N x K, run on B given K x N: it computes A·Bᵀ, which the check must reject.
    square_nn = GemmProblem(512, 512, 512, "bf16", "nn")
    artifact = ch.compile_config(GemmProblem(512, 512, 512, "bf16", "nt"), cfg(128, 128, 4), H200)
    evaluation = ch.HopperBackend().evaluate(artifact, square_nn, H200, policy=ONE_SAMPLE, seed=4)
    assert evaluation.status is Status.WRONG_RESULT
    assert evaluation.samples is None  # a wrong result is never timed
