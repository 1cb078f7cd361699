"""The kernels' own code, run on the CPU by the host emulator (tests/engine_cuda/emulator/), checked like on a GPU.

What the emulator proves: tile and fragment indexing, predication of ragged edges (zero-fill, guarded stores),
rasterization, split-K and the epilogues, for the exact source NVRTC compiles. What it cannot: timing, the
asynchrony of cp.async, register and bank behaviour (the GPU tests and the benchmark cover those).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from tracea_cli.ops.gemm.families.engine import gemm_source
from tracea_cli.ops.gemm.families.engine_space import gemm_space
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES, GemmProblem, make_inputs, reference
from tracea_cli.ops.verify import check


def _config(family, bm, bn, bk, wm, wn, stages=2, split_k=1, group_m=1, vec=1, **extra):
    return {"family": family, "block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn,
            "stages": stages, "split_k": split_k, "group_m": group_m, "vec": vec, **extra}


# (dtype, layout, epilogue, (m, n, k), config): each family and dtype, both layouts, every epilogue, ragged edges,
# unaligned rows (vec=1, fp16's element-wise copies), wide copies, split-K, grouped rasterization, deep pipelines.
CASES = [
    ("fp32", "nn", "none", (37, 45, 29), _config("simt", 32, 32, 8, 16, 32)),
    ("fp32", "nt", "bias_gelu", (64, 130, 64), _config("simt", 64, 64, 16, 32, 32, vec=4, split_k=2)),
    ("fp64", "nt", "bias_residual", (33, 17, 40), _config("simt", 32, 32, 8, 16, 32, vec=2)),
    # SIMT lane grids and fragment sets: 8 x 4 lanes (64 x 32 warp tiles), one fragment set (128 accumulator
    # registers: fp32 64 x 64, fp64 32 x 64), several warps, many steps of K with a ragged last one.
    ("fp32", "nn", "bias_relu", (70, 45, 37), _config("simt", 64, 32, 8, 64, 32)),
    ("fp32", "nt", "none", (130, 96, 76), _config("simt", 128, 64, 8, 64, 32, vec=4, split_k=2)),
    ("fp32", "nn", "bias_silu", (100, 132, 52), _config("simt", 64, 128, 16, 32, 64, vec=4)),
    ("fp32", "nt", "bias", (65, 70, 24), _config("simt", 64, 64, 8, 64, 64, vec=2)),
    ("fp64", "nn", "none", (40, 70, 19), _config("simt", 32, 64, 8, 32, 64)),
    ("fp16", "nn", "bias_silu", (17, 127, 33), _config("mma", 32, 64, 32, 16, 32, stages=2)),
    ("fp16", "nt", "none", (160, 64, 128), _config("mma", 32, 64, 32, 32, 32, stages=4, group_m=4, vec=8)),
    ("bf16", "nn", "bias_relu", (64, 72, 96), _config("mma", 64, 64, 16, 32, 32, stages=3, split_k=2, vec=8)),
    ("bf16", "nt", "bias", (1, 40, 20), _config("mma", 32, 32, 16, 16, 16, stages=2, vec=4)),
    ("tf32", "nn", "none", (70, 66, 48), _config("mma", 64, 64, 16, 32, 32, stages=3, vec=2)),
    ("tf32", "nt", "bias_gelu", (19, 33, 23), _config("mma", 32, 32, 16, 16, 16, stages=2)),
    # Sliced K: 2, 4 and 8 K-slices of warps, one or several warps each; M = 1, 16, 17; K and N ragged; with split-K
    # on top; fragment prefetching off (64 x 64 warp tiles, 8 instruction steps per warp) in the last case.
    ("fp16", "nn", "bias_silu", (17, 70, 300), _config("mma", 32, 32, 128, 16, 16, stages=3, vec=2, slice_k=2)),
    ("bf16", "nt", "none", (1, 96, 520), _config("mma", 32, 64, 256, 32, 32, stages=2, vec=8, slice_k=8)),
    ("fp16", "nn", "bias_relu", (16, 64, 1000), _config("mma", 32, 32, 64, 32, 32, stages=3, split_k=2, vec=8,
                                                       slice_k=4)),
    ("bf16", "nt", "bias_residual", (17, 50, 129), _config("mma", 32, 32, 128, 16, 32, stages=2, slice_k=4)),
    ("tf32", "nt", "bias_gelu", (17, 40, 77), _config("mma", 32, 32, 32, 16, 16, stages=2, slice_k=2)),
    ("tf32", "nn", "bias", (16, 33, 200), _config("mma", 32, 64, 64, 32, 32, stages=3, split_k=2, slice_k=8)),
    ("fp16", "nt", "none", (33, 64, 512), _config("mma", 64, 64, 256, 64, 64, stages=2, vec=8, slice_k=2)),
    # fp32 on mma.sync as 3xTF32 (held to fp32's bound): prefetched fragments, ragged element-wise rows, sliced K,
    # and 64 x 32 warp tiles (64 accumulators and as many for each step's own sums: fragments loaded just in time).
    ("fp32", "nn", "bias_relu", (70, 66, 48), _config("mma", 64, 64, 16, 32, 32, stages=3, vec=2)),
    ("fp32", "nt", "none", (37, 45, 29), _config("mma", 32, 32, 16, 16, 16, stages=2)),
    ("fp32", "nn", "bias_silu", (17, 40, 77), _config("mma", 32, 32, 32, 16, 16, stages=2, slice_k=2)),
    ("fp32", "nt", "bias", (65, 70, 40), _config("mma", 64, 64, 16, 64, 32, stages=2, vec=4)),
]


def _emulate(emulator, problem, config, seed, name):
    harness, workdir, launcher = emulator
    exe = harness.build(problem, config, workdir / name, launcher)
    inputs = make_inputs(problem, np.random.default_rng(seed))
    out = harness.run(exe, problem, config, inputs, workdir / name)
    return check(out, reference(problem, inputs)["C"], problem.dtype)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_emulated_kernel_matches_the_reference(case, emulator, sm90):
    dtype, layout, epilogue, shape, config = CASES[case]
    problem = GemmProblem(*shape, dtype=dtype, layout=layout, epilogue=epilogue)
    assert gemm_space(problem, sm90, config["family"]).why_invalid(config) is None
    verdict = _emulate(emulator, problem, config, seed=case, name=f"case{case}")
    assert verdict.ok, verdict.reason


def _emulate_mutant(emulator, monkeypatch, problem, config, old: str, new: str, *, seed: int, name: str):
    """The verdict on the kernel's source with `old` replaced by `new` (which must change it)."""
    right = gemm_source(problem, config)
    wrong = right.replace(old, new)
    assert wrong != right
    harness, workdir, launcher = emulator
    monkeypatch.setattr(harness, "gemm_source", lambda p, c: wrong)
    return _emulate(emulator, problem, config, seed=seed, name=name)


def test_the_emulator_catches_a_wrong_kernel(emulator, sm90, monkeypatch):
    """A fragment mix-up (two B registers swapped) must fail the check: the emulation is not vacuous."""
    verdict = _emulate_mutant(emulator, monkeypatch, GemmProblem(32, 32, 32, dtype="fp16", layout="nt"),
                              _config("mma", 32, 32, 16, 16, 16, stages=2, vec=8),
                              "f.b[j][0] = r[0], f.b[j][1] = r[1]", "f.b[j][0] = r[1], f.b[j][1] = r[0]", seed=1, name="wrong")
    assert not verdict.ok


def test_3xtf32_without_a_cross_term_misses_fp32s_bound(emulator, sm90, monkeypatch):
    """fp32 on tensor cores needs both cross terms: dropping small(A)·big(B) leaves tf32-class error, which fp32's
    bound (1e-5) must reject."""
    problem = GemmProblem(32, 32, 64, dtype="fp32", layout="nt")
    config = _config("mma", 32, 32, 16, 16, 16, stages=2, vec=4)
    assert _emulate(emulator, problem, config, seed=4, name="x3_right").ok
    verdict = _emulate_mutant(emulator, monkeypatch, problem, config,
                              "mma_16x8<float>(acc[i][j], small.a[i], big.b[j]);", "", seed=4, name="x3_wrong")
    assert not verdict.ok and "error" in verdict.reason


def test_3xtf32_sums_each_step_apart_over_a_deep_k(emulator, sm90, monkeypatch):
    """The emulated tensor cores truncate their sums as the GPU's do: over K = 4096 one accumulator drifts past fp32's
    bound (2.9e-5 on an H100), while the kernel's per-step sums added in IEEE fp32 stay within it."""
    problem = GemmProblem(16, 16, 4096, dtype="fp32", layout="nt")
    config = _config("mma", 32, 32, 32, 16, 16, stages=2, vec=4)
    assert _emulate(emulator, problem, config, seed=5, name="x3_deep").ok
    verdict = _emulate_mutant(emulator, monkeypatch, problem, config, "= G::SPLIT ? part : acc;", "= acc;", seed=5,
                              name="x3_deep_one_accumulator")
    assert not verdict.ok and "error" in verdict.reason


def test_the_emulator_catches_a_simt_prefetch_from_the_wrong_buffer(emulator, sm90, monkeypatch):
    """The next step's first fragments must come from the buffer just stored: reading the old one must fail."""
    verdict = _emulate_mutant(emulator, monkeypatch, GemmProblem(32, 32, 40, dtype="fp32"),
                              _config("simt", 32, 32, 8, 16, 32, vec=4),
                              "load_fragments(next, other, 0);", "load_fragments(next, buf, 0);", seed=2, name="wrong_simt")
    assert not verdict.ok


def test_the_emulator_catches_a_sliced_k_sum_that_drops_a_slice(emulator, sm90, monkeypatch):
    """Slice 0 must add every other K-slice's partial sums: leaving the last one out must fail."""
    verdict = _emulate_mutant(emulator, monkeypatch, GemmProblem(16, 32, 256, dtype="fp16"),
                              _config("mma", 32, 32, 64, 32, 32, stages=2, vec=8, slice_k=4),
                              "add_partials<G, G::SLICE_K - 1>", "add_partials<G, G::SLICE_K - 2>", seed=3,
                              name="wrong_slices")
    assert not verdict.ok


@pytest.mark.skipif(not __import__("os").environ.get("TRACEA_SLOW_TESTS"), reason="opt in: TRACEA_SLOW_TESTS=1")
def test_random_configurations_on_awkward_small_shapes(emulator, sm90):
    """Opt-in sweep: 60 seeded random valid configurations, random dtype, layout, epilogue and small shapes."""
    rng = random.Random(7)
    failures = []
    for i in range(60):
        problem = GemmProblem(*(rng.choice((1, 17, 33, 64, 100, 127, 130)) for _ in range(3)),
                              dtype=rng.choice(("fp32", "fp64", "tf32", "fp16", "bf16")),
                              layout=rng.choice(("nn", "nt")), epilogue=rng.choice(EPILOGUE_NAMES))
        # K clusters (cluster_k > 1) are left out: the emulator has no thread-block clusters (__cluster_dims__, DSMEM)
        valid = [c for c in gemm_space(problem, sm90).valid_configs()
                 if c["block_m"] * c["block_n"] <= 128 * 128 and c.get("cluster_k", 1) == 1]
        config = rng.choice(valid)
        verdict = _emulate(emulator, problem, config, seed=i, name=f"sweep{i}")
        if not verdict.ok:
            failures.append((problem.label, config, verdict.reason))
    assert not failures, failures


# ---- the simt family's GEMV-class kernel (fp32, M <= 16, layout nn), run by following its launch plan -------------

def _gemv(rows, bn, bk, vec=1, split_k=1, prefetch=0):
    return _config("simt", rows, bn, bk, 16, 32, split_k=split_k, vec=vec, kernel="gemv",
                   **({"prefetch": 1} if prefetch else {}))


# Ragged M (rows of C below the block's), N and K not multiples of the tile, one and several K slices (the slices'
# sums added by the second pass), every vector width, several row tiles (block_m < M), an epilogue on each pass; with
# and without the next step's B prefetched (slices of one step, of several, and a last step cut short by K).
GEMV_CASES = [
    ((1, 45, 37), "none", _gemv(1, 32, 16)),
    ((3, 130, 200), "bias_gelu", _gemv(4, 64, 64, vec=2, split_k=4)),
    ((16, 68, 100), "bias_residual", _gemv(16, 64, 64, vec=4, split_k=2)),
    ((13, 40, 300), "bias_relu", _gemv(8, 32, 128, vec=4, split_k=2)),
    ((5, 256, 96), "bias", _gemv(2, 256, 8, vec=1)),
    ((1, 45, 37), "none", _gemv(1, 32, 16, prefetch=1)),
    ((1, 130, 1000), "bias_gelu", _gemv(1, 128, 64, vec=2, split_k=4, prefetch=1)),
    ((13, 40, 300), "bias_relu", _gemv(8, 32, 32, vec=4, split_k=2, prefetch=1)),
    ((5, 256, 96), "bias", _gemv(2, 256, 8, vec=1, prefetch=1)),
]


def _emulate_by_plan(emulator_plan, problem, config, seed, name, source=None):
    from tracea_cli.ops.dtypes import to_storage
    from tracea_cli.ops.gemm.families.engine import gemm_args, gemm_launch

    harness, workdir, launcher = emulator_plan
    inputs = make_inputs(problem, np.random.default_rng(seed))
    operands = {name: to_storage(v, problem.dtype) for name, v in inputs.items()}
    operands["C"] = to_storage(np.full((problem.m, problem.n), np.nan), problem.dtype)
    values = gemm_args(problem, operands)
    plan = gemm_launch(problem, config)
    exe = harness.build_plan(source or gemm_source(problem, config), plan, values, workdir / name, launcher)
    out = harness.run_plan(exe, plan, values, ("C",), workdir / name)["C"]
    from tracea_cli.ops.dtypes import from_storage
    return check(from_storage(out, problem.dtype), reference(problem, inputs)["C"], problem.dtype)


@pytest.fixture(scope="module")
def emulator_plan(emulator):
    harness, workdir, _ = emulator
    return harness, workdir, harness.build_plan_launcher(workdir)


@pytest.mark.parametrize("case", range(len(GEMV_CASES)), ids=[f"gemv-{c[0]}-{c[1]}" for c in GEMV_CASES])
def test_emulated_gemv_kernel_matches_the_reference(case, emulator_plan, sm90):
    shape, epilogue, config = GEMV_CASES[case]
    problem = GemmProblem(*shape, dtype="fp32", layout="nn", epilogue=epilogue)
    assert gemm_space(problem, sm90).why_invalid(config) is None
    verdict = _emulate_by_plan(emulator_plan, problem, config, seed=100 + case, name=f"gemv{case}")
    assert verdict.ok, verdict.reason


def test_the_emulator_catches_a_prefetch_of_the_wrong_rows(emulator_plan, sm90):
    """The prefetched registers must hold the next step's rows: loading this step's rows again must fail."""
    problem = GemmProblem(1, 64, 512, dtype="fp32")
    config = _gemv(1, 64, 64, vec=4, split_k=2, prefetch=1)
    right = gemm_source(problem, config)
    wrong = right.replace("load_b(rn, k0 + G::BLOCK_K, b_src + b_step)", "load_b(rn, k0, b_src)")
    assert wrong != right
    assert _emulate_by_plan(emulator_plan, problem, config, seed=6, name="gemv_prefetch_ok").ok
    assert not _emulate_by_plan(emulator_plan, problem, config, seed=6, name="gemv_prefetch_wrong", source=wrong).ok


def test_the_emulator_catches_a_gemv_sum_that_drops_a_slice(emulator_plan, sm90):
    """The second pass must add every K slice: leaving the last one out must fail."""
    problem = GemmProblem(4, 64, 256, dtype="fp32")
    config = _gemv(4, 64, 64, vec=4, split_k=4)
    right = gemm_source(problem, config)
    wrong = right.replace("z < G::SPLIT_K; ++z", "z < G::SPLIT_K - 1; ++z")
    assert wrong != right
    verdict = _emulate_by_plan(emulator_plan, problem, config, seed=5, name="gemv_wrong", source=wrong)
    assert not verdict.ok


# stage = 1: the operands whose rows the vector width does not divide are copied into padded scratch first
# (gemm_stage_pad.cuh) and the main kernel reads the copies. Both families, both layouts, A and B staged, B alone
# (K aligned), split-K's workspace before the scratch, epilogues reading C's ragged rows.
STAGED_CASES = [
    ("fp32", "nn", "bias_relu", (37, 45, 29), _config("simt", 32, 32, 8, 16, 32, vec=4, stage=1)),
    ("fp32", "nt", "bias_residual", (70, 33, 51), _config("simt", 64, 32, 8, 32, 32, vec=4, split_k=2, stage=1)),
    ("fp32", "nn", "none", (40, 66, 64), _config("simt", 32, 64, 16, 16, 32, vec=4, stage=1)),
    ("fp64", "nn", "bias", (20, 17, 13), _config("simt", 32, 32, 8, 16, 32, vec=2, stage=1)),
    ("fp16", "nn", "bias_silu", (33, 70, 37), _config("mma", 32, 64, 32, 16, 32, stages=3, vec=8, stage=1)),
    ("bf16", "nt", "none", (17, 40, 45), _config("mma", 32, 32, 16, 16, 16, vec=8, stage=1)),
    ("tf32", "nn", "bias_gelu", (19, 30, 27), _config("mma", 32, 32, 16, 16, 16, vec=4, stage=1)),
    ("fp32", "nt", "bias_gelu", (21, 34, 27), _config("mma", 32, 32, 16, 16, 16, vec=4, stage=1)),
    # long rows, many blocks of the copy along y (17 of 256 columns): B's in nn, A's and B's in nt
    ("fp32", "nn", "bias", (8, 4099, 9), _config("simt", 32, 32, 8, 16, 32, vec=4, stage=1)),
    ("fp32", "nt", "none", (9, 8, 4101), _config("simt", 32, 32, 8, 16, 32, vec=4, stage=1)),
]


@pytest.mark.parametrize("case", range(len(STAGED_CASES)),
                         ids=[f"staged-{c[0]}-{c[1]}-{'x'.join(map(str, c[3]))}" for c in STAGED_CASES])
def test_emulated_staged_kernels_match_the_reference(case, emulator_plan, sm90):
    from tracea_cli.ops.gemm.families.engine import gemm_launch

    dtype, layout, epilogue, shape, config = STAGED_CASES[case]
    problem = GemmProblem(*shape, dtype=dtype, layout=layout, epilogue=epilogue)
    assert gemm_space(problem, sm90, config["family"]).why_invalid(config) is None
    assert gemm_launch(problem, config).scratch, "the case stages nothing"
    verdict = _emulate_by_plan(emulator_plan, problem, config, seed=200 + case, name=f"staged{case}")
    assert verdict.ok, verdict.reason
