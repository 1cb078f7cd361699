"""On a GPU: every dtype, layout and epilogue over the awkward shapes, checked against the float64 reference.

Marked `gpu`; skipped with the reason where CuPy or a CUDA device is missing. Select one dtype with `-k fp16`.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tracea_cli.backends.base import Artifact, Status
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.gemm.families.engine_space import gemm_space, hand_picked
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES, GemmProblem
from tracea_cli.timing import QUICK

pytestmark = pytest.mark.gpu

DTYPES = ("fp32", "fp64", "tf32", "fp16", "bf16")
# dtype, or dtype_family for a family other than the dtype's own: fp32 on mma.sync (3xTF32)
KINDS = (*DTYPES, "fp32_mma")
TENSOR_CORE_KINDS = ("tf32", "fp16", "bf16", "fp32_mma")


def _kind(kind: str) -> tuple[str, str | None]:
    dtype, _, family = kind.partition("_")
    return dtype, family or None
AWKWARD = (1, 17, 127, 1000, 1023)
EPILOGUE_SHAPES = ((1000, 1023, 127), (17, 1, 1023), (127, 1000, 17), (1023, 17, 1000))
BACKEND = OpBackend("gemm", "cuda")


def _build(job, target):
    try:
        return BACKEND.compile(job[0], job[1], target), ""
    except Exception as e:  # reported with the job, not raised from the pool
        return None, f"{type(e).__name__}: {e}"


def _check_all(jobs, target):
    """Compile (in parallel) and check each (problem, config); returns the failures as text, one per job."""
    backend = BACKEND
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        built = list(pool.map(lambda job: _build(job, target), jobs))
    failures = []
    for (problem, config), (artifact, error) in zip(jobs, built):
        if artifact is None:
            failures.append(f"{problem.label} {config}: compile: {error[:400]}")
            continue
        seed = (problem.m * 7919 + problem.n * 104729 + problem.k) & 0xFFFF
        ev = backend.check(artifact, problem, target, seed=seed)
        if not ev.ok:
            failures.append(f"{problem.label} {config}: {ev.status.value}: {ev.reason}")
            if ev.status is Status.LAUNCH_ERROR:  # the context may be lost: what follows would only echo this
                break
    return failures


@pytest.mark.parametrize("m", AWKWARD)
@pytest.mark.parametrize("layout", ("nn", "nt"))
@pytest.mark.parametrize("kind", KINDS)
def test_every_awkward_shape(kind, layout, m, gpu_target):
    """All combinations of 1, 17, 127, 1000, 1023 for M, N and K; the first and last hand-picked configurations."""
    dtype, family = _kind(kind)
    jobs = []
    for n, k in itertools.product(AWKWARD, repeat=2):
        problem = GemmProblem(m, n, k, dtype=dtype, layout=layout)
        picks = hand_picked(problem, gpu_target, family=family)
        jobs += [(problem, c) for c in {id(c): c for c in (picks[0], picks[-1])}.values()]
    failures = _check_all(jobs, gpu_target)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("layout", ("nn", "nt"))
@pytest.mark.parametrize("kind", KINDS)
def test_every_epilogue(kind, layout, gpu_target):
    dtype, family = _kind(kind)
    jobs = []
    for epilogue in EPILOGUE_NAMES[1:]:
        for shape in EPILOGUE_SHAPES:
            problem = GemmProblem(*shape, dtype=dtype, layout=layout, epilogue=epilogue)
            jobs += [(problem, c) for c in hand_picked(problem, gpu_target, family=family)[:2]]
    failures = _check_all(jobs, gpu_target)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("kind", KINDS)
def test_a_sample_of_the_space_on_a_ragged_shape(kind, gpu_target):
    """Forty valid configurations spread over the space (split-K, rasterization, stages, warp tiles, vectors)."""
    dtype, family = _kind(kind)
    problem = GemmProblem(1000, 1016, 1000, dtype=dtype, layout="nt", epilogue="bias_relu")
    valid = gemm_space(problem, gpu_target, family).valid_configs()
    jobs = [(problem, c) for c in valid[:: max(1, len(valid) // 40)]]
    failures = _check_all(jobs, gpu_target)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("layout", ("nn", "nt"))
@pytest.mark.parametrize("kind", KINDS)
def test_staged_rows_over_odd_k_and_n(kind, layout, gpu_target):
    """stage = 1 (padded copies of A and/or B, then vector loads): a spread of the staged configurations on odd K and
    N, one with K aligned (B alone staged in nn), every epilogue on the first."""
    dtype, family = _kind(kind)
    jobs = []
    for shape, epilogues in (((1001, 1023, 999), EPILOGUE_NAMES), ((999, 1021, 1000), ("bias_residual",))):
        for epilogue in epilogues:
            problem = GemmProblem(*shape, dtype=dtype, layout=layout, epilogue=epilogue)
            staged = [c for c in gemm_space(problem, gpu_target, family).valid_configs() if c.get("stage") == 1]
            if not staged:
                continue  # nt with K aligned: nothing to stage
            jobs += [(problem, c) for c in staged[:: max(1, len(staged) // (12 if epilogue == "none" else 2))]]
    assert jobs
    failures = _check_all(jobs, gpu_target)
    assert not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("layout", ("nn", "nt"))
@pytest.mark.parametrize("kind", TENSOR_CORE_KINDS)
def test_sixteen_row_blocks_over_small_and_ragged_m(kind, layout, gpu_target):
    """block_m = 16 (sliced K or not, split-K, every vector width the rows allow) where M is 1, 16, 17 or 40."""
    shapes = ((256, 16, 32, 5, 8, 1), (128, 16, 32, 4, 4, 1), (64, 16, 32, 3, 2, 1), (32, 16, 16, 3, 1, 4), (64, 16, 64, 2, 1, 1))
    dtype, family = _kind(kind)
    jobs = []
    for m in (1, 16, 17, 40):
        problem = GemmProblem(m, 1000, 1016, dtype=dtype, layout=layout, epilogue="bias_relu" if m == 17 else "none")
        space = gemm_space(problem, gpu_target, family)
        for (bk, wm, wn, stages, slice_k, split_k), vec in itertools.product(shapes, space.param("vec").values):
            config = space.complete({"family": "mma", "block_m": 16, "block_n": 64 if wn == 64 else 32, "block_k": bk,
                                     "warp_m": wm, "warp_n": wn, "stages": stages, "slice_k": slice_k,
                                     "split_k": split_k, "group_m": 1, "vec": vec})
            if space.why_invalid(config) is None:
                jobs.append((problem, config))
    failures = _check_all(jobs, gpu_target)
    assert len(jobs) >= 20 and not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("layout", ("nn", "nt"))
@pytest.mark.parametrize("kind", TENSOR_CORE_KINDS)
def test_k_clusters_over_small_and_ragged_shapes(kind, layout, gpu_target):
    """cluster_k = 2 and 4 (sm_90): K split across a cluster's blocks, sums added through DSMEM, with and without
    sliced K, every vector width the rows allow, ragged M, N and K, a fused epilogue."""
    if gpu_target.limits.compute_capability < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    shapes = ((256, 16, 32, 32, 4, 8, 2), (128, 16, 64, 32, 4, 4, 4), (64, 32, 32, 32, 3, 1, 2), (256, 16, 128, 64, 4, 4, 2),
              (64, 16, 32, 32, 2, 2, 4), (32, 32, 64, 32, 2, 1, 2))
    dtype, family = _kind(kind)
    jobs = []
    for m, n, k in ((1, 1000, 1016), (16, 4096, 4096), (17, 1000, 1016), (40, 1023, 777)):
        problem = GemmProblem(m, n, k, dtype=dtype, layout=layout, epilogue="bias_silu" if m == 17 else "none")
        space = gemm_space(problem, gpu_target, family)
        for (bk, bm, bn, wn, stages, slice_k, cluster_k), vec in itertools.product(shapes, space.param("vec").values):
            config = space.complete({"family": "mma", "block_m": bm, "block_n": bn, "block_k": bk, "warp_m": 16,
                                     "warp_n": wn, "stages": stages, "slice_k": slice_k, "cluster_k": cluster_k,
                                     "split_k": 1, "group_m": 1, "vec": vec})
            if space.why_invalid(config) is None:
                jobs.append((problem, config))
    failures = _check_all(jobs, gpu_target)
    assert len(jobs) >= 20 and not failures, f"{len(failures)} of {len(jobs)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_times_only_after_checking_and_the_baseline_runs(kind, gpu_target):
    dtype, family = _kind(kind)
    backend = BACKEND
    problem = GemmProblem(512, 512, 512, dtype=dtype)
    config = hand_picked(problem, gpu_target, family=family)[0]
    ev = backend.evaluate(backend.compile(problem, config, gpu_target), problem, gpu_target, policy=QUICK, seed=3)
    assert ev.status is Status.OK, ev.reason
    assert ev.samples.n >= QUICK.min_samples and all(t > 0 for t in ev.samples.times_ms)
    assert ev.rel_error is not None and ev.rel_error <= 1e-2
    name, base = backend.baseline(problem, gpu_target, policy=QUICK, seed=3)
    assert name.startswith("cublas")
    assert base.status is Status.OK, base.reason
    assert base.samples.n >= QUICK.min_samples


def test_a_wrong_kernel_is_reported_not_timed(gpu_target, monkeypatch):
    """A kernel that writes a wrong C is a WRONG_RESULT with its error, never timed; a launch it cannot make is a
    LAUNCH_ERROR. Neither raises."""
    import tracea_cli.backends.cuda as cuda
    from tracea_cli.backends import nvrtc

    # cuda.load keeps one loaded module (with its artifact's plan) per cubin: start from none, so that the impossible
    # plan below, which shares the good cubin, is the one loaded.
    monkeypatch.setattr(cuda, "_LOADED", {})
    backend = BACKEND
    problem = GemmProblem(256, 256, 256, dtype="fp16", layout="nt")
    config = hand_picked(problem, gpu_target)[0]
    good = backend.compile(problem, config, gpu_target)
    wrong_source = good.source.replace("f.b[j][0] = r[0], f.b[j][1] = r[1]", "f.b[j][0] = r[1], f.b[j][1] = r[0]")
    assert wrong_source != good.source
    program = nvrtc.compile_source(wrong_source, nvrtc.CompileOptions(arch=gpu_target.arch))
    wrong = replace(good, binary=program.cubin, source=wrong_source)
    ev = backend.evaluate(wrong, problem, gpu_target, policy=QUICK, seed=5)
    assert ev.status is Status.WRONG_RESULT and ev.samples is None and ev.rel_error > 1e-2
    steps = list(good.plan.steps)
    steps[-1] = replace(steps[-1], dynamic_smem_bytes=1 << 20)  # more shared memory than any GPU has
    impossible = replace(good, plan=replace(good.plan, steps=tuple(steps)))
    ev = backend.evaluate(impossible, problem, gpu_target, policy=QUICK, seed=5)
    assert ev.status is Status.LAUNCH_ERROR and ev.reason
    ev = backend.evaluate(good, problem, gpu_target, policy=QUICK, seed=5)  # and the device is still usable
    assert ev.status is Status.OK, ev.reason
    assert isinstance(good, Artifact) and good.plan.grid_extent("tiles", {"M": 256, "N": 256, "K": 256}) >= 1


def test_3xtf32_holds_fp32s_bound_over_deep_k(gpu_target):
    """fp32 on mma.sync (3xTF32) sums each pipeline step into fresh accumulators and adds them in IEEE fp32: the tensor
    cores' own sums truncate, and over K = 4096 in one accumulator the error was 2.9e-5 (H100), above fp32's bound.
    Here K = 8192 in one slice (no split K, no sliced or clustered K) must stay within it."""
    problem = GemmProblem(256, 256, 8192, dtype="fp32", layout="nt")
    picks = [c for c in hand_picked(problem, gpu_target, family="mma")
             if c["split_k"] == 1 and c.get("slice_k", 1) == 1 and c.get("cluster_k", 1) == 1]
    jobs = [(problem, c) for c in picks[:3]]
    failures = _check_all(jobs, gpu_target)
    assert jobs and not failures, "\n".join(failures)
