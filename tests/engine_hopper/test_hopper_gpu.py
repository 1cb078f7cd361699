"""The wgmma family on a Hopper GPU: results match the float64 reference over awkward shapes (also behind the staging
pre-pass, and with K split into slices), and a wrong kernel is caught by the check before anything is timed. Skipped, with the reason, without CuPy, cuda.bindings or an sm_90 GPU."""

from __future__ import annotations

import pytest

from tracea_cli.backends import cuda
from tracea_cli.backends.base import Status
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.target import Target, limits_for
from tracea_cli.timing import TimingPolicy

pytestmark = pytest.mark.gpu

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"), device_index=0)
ONE_SAMPLE = TimingPolicy(warmup=1, min_samples=1, max_samples=2, max_seconds=0.1)
BACKEND = OpBackend("gemm", "cuda")


def cfg(tm, tn, stages, consumers=2, cluster=1, persistent=1, group=1, store="direct", schedule="cooperative"):
    return {"family": "wgmma", "tile_m": tm, "tile_n": tn, "stages": stages, "consumers": consumers,
            "schedule": schedule, "cluster_m": cluster, "persistent": persistent, "group_m": group, "store": store}


@pytest.fixture(scope="module", autouse=True)
def hopper_gpu():
    reason = cuda.gpu_ready(0)
    if reason:
        pytest.skip(reason)
    import cupy

    cc = str(cupy.cuda.Device(0).compute_capability)  # "90" on Hopper
    if cc != "90":
        pytest.skip(f"this GPU is compute capability {cc[:-1]}.{cc[-1]}; the wgmma family runs on 9.0 (Hopper) only")


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

# Behind the staging pre-pass (wgmma_space.staging): K not a multiple of 16 bytes (A, and B in nt, copied with a
# padded leading dimension; the last K-block cut mid-row) and tf32 nn (B transposed into scratch).
STAGED_CASES = [
    (GemmProblem(1000, 3000, 777, "fp16", "nn"), cfg(128, 256, 3, store="tma", group=4)),
    (GemmProblem(1000, 3000, 777, "fp16", "nt", "bias_silu"), cfg(128, 256, 4, cluster=2, group=4)),
    (GemmProblem(127, 256, 1023, "bf16", "nt"), cfg(128, 128, 4, consumers=1, persistent=0)),
    (GemmProblem(200, 136, 9, "bf16", "nn", "bias_residual"), cfg(128, 128, 2, consumers=1)),
    (GemmProblem(256, 512, 320, "tf32", "nn"), cfg(128, 128, 4)),
    (GemmProblem(1000, 3000, 776, "tf32", "nn", "bias"), cfg(128, 256, 4, cluster=2, group=4)),
    (GemmProblem(1000, 3000, 777, "tf32", "nn"), cfg(128, 128, 3, store="tma", schedule="pingpong", group=4)),
    (GemmProblem(520, 392, 263, "tf32", "nt"), cfg(128, 128, 4, group=4)),
]


# Ragged N (C's rows not 16-byte strided: no map over C, elements stored one by one, bias and residual read likewise;
# B staged with a padded N in nn): every epilogue, both layouts, pingpong, clusters, N odd and N even.
RAGGED_N_CASES = [
    (GemmProblem(4095, 4097, 4091, "fp16", "nn"), cfg(128, 256, 3, group=8)),
    (GemmProblem(3001, 5003, 2999, "bf16", "nt", "bias_residual"), cfg(128, 128, 4, schedule="pingpong", group=4)),
    (GemmProblem(517, 1001, 259, "bf16", "nn", "bias_silu"), cfg(128, 128, 4, cluster=2, group=4)),
    (GemmProblem(200, 131, 64, "fp16", "nt", "bias_relu"), cfg(64, 64, 2, consumers=1, persistent=0)),
    (GemmProblem(300, 4100, 512, "fp16", "nn", "bias_gelu"), cfg(128, 256, 4, group=4)),
    (GemmProblem(333, 1001, 520, "tf32", "nt", "bias_residual"), cfg(128, 128, 4, group=4)),
    (GemmProblem(333, 1003, 521, "tf32", "nn", "bias"), cfg(128, 128, 3, group=4)),
    (GemmProblem(1, 4097, 4091, "bf16", "nn"), cfg(64, 128, 4, consumers=1)),
]


@pytest.mark.parametrize("problem,config", RAGGED_N_CASES, ids=[p.label for p, _ in RAGGED_N_CASES])
def test_ragged_n_problems_match_the_float64_reference(problem, config):
    artifact = BACKEND.compile(problem, config, H200)
    assert "map_c" not in artifact.plan.tensor_maps
    evaluation = BACKEND.evaluate(artifact, problem, H200, policy=ONE_SAMPLE, seed=7)
    assert evaluation.status is Status.OK, evaluation.reason
    assert evaluation.rel_error <= get_dtype(problem.dtype).bound


@pytest.mark.parametrize("problem,config", CASES, ids=[p.label for p, _ in CASES])
def test_results_match_the_float64_reference(problem, config):
    artifact = BACKEND.compile(problem, config, H200)
    evaluation = BACKEND.evaluate(artifact, problem, H200, policy=ONE_SAMPLE, seed=3)
    assert evaluation.status is Status.OK, evaluation.reason
    assert evaluation.rel_error <= get_dtype(problem.dtype).bound
    assert evaluation.samples is not None and evaluation.samples.n >= 1


@pytest.mark.parametrize("problem,config", STAGED_CASES, ids=[p.label for p, _ in STAGED_CASES])
def test_staged_problems_match_the_float64_reference(problem, config):
    artifact = BACKEND.compile(problem, config, H200)
    assert any(step.name.startswith("gemm_stage_") for step in artifact.plan.steps)
    evaluation = BACKEND.evaluate(artifact, problem, H200, policy=ONE_SAMPLE, seed=5)
    assert evaluation.status is Status.OK, evaluation.reason
    assert evaluation.rel_error <= get_dtype(problem.dtype).bound
    assert evaluation.samples is not None and evaluation.samples.n >= 1


def test_a_staged_launch_leaves_its_inputs_alone_and_repeats_bit_for_bit():
    import cupy
    import numpy as np

    from tracea_cli.backends.checked import poison, upload
    from tracea_cli.ops.gemm.problem import make_inputs

    problem = GemmProblem(1000, 3000, 777, "tf32", "nt")  # both operands staged
    artifact = BACKEND.compile(problem, cfg(128, 256, 4, group=4), H200)
    assert [s.name for s in artifact.plan.scratch] == ["A_staged", "B_staged"]
    buffers = upload(cupy, problem.tensors(), make_inputs(problem, np.random.default_rng(6)), problem.dtype)
    a, b = buffers["A"].copy(), buffers["B"].copy()
    stream = cupy.cuda.get_current_stream()
    family = BACKEND.family_of(artifact.config)
    launch = cuda.bind(cuda.load(artifact), family.args(problem, buffers), stream.ptr)
    poison(buffers["C"], problem.dtype)  # C NaN: an element the launch leaves unwritten shows below
    launch()
    stream.synchronize()
    first = buffers["C"].copy()
    launch()
    stream.synchronize()
    assert bool(cupy.array_equal(first, buffers["C"])) and not bool(cupy.isnan(first).any())
    assert bool(cupy.array_equal(a, buffers["A"])) and bool(cupy.array_equal(b, buffers["B"]))


def test_a_kernel_computing_the_wrong_product_is_caught():
    # Built for B given N x K, run on B given K x N: it computes A·Bᵀ, which the check must reject.
    square_nn = GemmProblem(512, 512, 512, "bf16", "nn")
    artifact = BACKEND.compile(GemmProblem(512, 512, 512, "bf16", "nt"), cfg(128, 128, 4), H200)
    evaluation = BACKEND.evaluate(artifact, square_nn, H200, policy=ONE_SAMPLE, seed=4)
    assert evaluation.status is Status.WRONG_RESULT
    assert evaluation.samples is None  # a wrong result is never timed


# Split-K (WG_SPLIT_K > 1): the slices' sums meet in the fp32 workspace, the second pass applies the epilogue. Few
# tiles and a long K, as the space's rule asks; ragged N with pingpong; clusters; tf32; K split unevenly.
SPLIT_K_CASES = [
    (GemmProblem(1024, 512, 8192, "bf16", "nt", "bias_silu"), {**cfg(128, 128, 4, group=8), "split_k": 4}),
    (GemmProblem(500, 1001, 4096, "fp16", "nn", "bias_residual"),
     {**cfg(128, 128, 5, schedule="pingpong", group=4), "split_k": 3}),
    (GemmProblem(256, 1024, 8192, "tf32", "nt", "bias_relu"), {**cfg(128, 128, 4, cluster=2), "split_k": 2}),
    (GemmProblem(16, 4096, 4160, "bf16", "nt"), {**cfg(64, 128, 6, consumers=1), "split_k": 3}),
]


@pytest.mark.parametrize("problem,config", SPLIT_K_CASES, ids=[p.label for p, _ in SPLIT_K_CASES])
def test_split_k_problems_match_the_float64_reference(problem, config):
    artifact = BACKEND.compile(problem, config, H200)
    assert [getattr(s, "name", "memset") for s in artifact.plan.steps][-2:] == ["gemm_wgmma", "gemm_wgmma_splitk"]
    evaluation = BACKEND.evaluate(artifact, problem, H200, policy=ONE_SAMPLE, seed=9)
    assert evaluation.status is Status.OK, evaluation.reason
    assert evaluation.rel_error <= get_dtype(problem.dtype).bound


def test_split_k_leaves_its_workspace_zero_for_the_next_call():
    """The workspace is zeroed once, when bound; the second pass zeroes what it read. A second and third call must
    give the first call's result (up to the order of the atomic adds), not the sums of several calls."""
    import cupy
    import numpy as np

    from tracea_cli.backends.checked import poison, upload
    from tracea_cli.ops.gemm.problem import make_inputs

    problem, config = SPLIT_K_CASES[0]
    artifact = BACKEND.compile(problem, config, H200)
    buffers = upload(cupy, problem.tensors(), make_inputs(problem, np.random.default_rng(11)), problem.dtype)
    stream = cupy.cuda.get_current_stream()
    launch = cuda.bind(cuda.load(artifact), BACKEND.family_of(artifact.config).args(problem, buffers), stream.ptr)
    results = []
    for _ in range(3):
        poison(buffers["C"], problem.dtype)
        launch()
        stream.synchronize()
        results.append(buffers["C"].astype(cupy.float32))
    scale = float(cupy.abs(results[0]).max())
    assert scale > 0 and not bool(cupy.isnan(results[0]).any())
    for later in results[1:]:
        assert float(cupy.abs(later - results[0]).max()) <= 1e-2 * scale


# K pairs (WG_CLUSTER_K = 2): the two CTAs of a cluster each multiply half of K, one consumer's sums cross to the
# other CTA through distributed shared memory. Few tiles and a long K, as the space's rule asks; an odd number of
# K-blocks (the halves differ); ragged M and N (spare rows, element-wise stores); tf32; a TMA store; every epilogue
# kind that reads more than the sums.
PAIR = {"cluster_k": 2, "persistent": 0}
PAIR_CASES = [
    (GemmProblem(1568, 512, 4608, "fp16", "nt", "bias_residual"), {**cfg(128, 128, 4, group=8), **PAIR}),
    (GemmProblem(1000, 1001, 4160, "bf16", "nn", "bias_silu"), {**cfg(128, 128, 4, group=4), **PAIR}),
    (GemmProblem(512, 768, 8192, "tf32", "nt", "bias_relu"), {**cfg(128, 192, 3), **PAIR}),
    (GemmProblem(300, 1024, 4032, "bf16", "nt"), {**cfg(128, 128, 4, store="tma", group=1), **PAIR}),
]


@pytest.mark.parametrize("problem,config", PAIR_CASES, ids=[p.label for p, _ in PAIR_CASES])
def test_k_pair_problems_match_the_float64_reference(problem, config):
    artifact = BACKEND.compile(problem, config, H200)
    main = artifact.plan.main_kernel
    assert main.cluster == (1, 2, 1) and main.grid[1] == 2
    evaluation = BACKEND.evaluate(artifact, problem, H200, policy=ONE_SAMPLE, seed=13)
    assert evaluation.status is Status.OK, evaluation.reason
    assert evaluation.rel_error <= get_dtype(problem.dtype).bound
