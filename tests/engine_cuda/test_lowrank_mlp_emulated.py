"""The lowrank-mlp CUDA kernels' own code, run on the CPU by the host emulator (tests/engine_cuda/emulator/), checked
like on a GPU: the fused kernel (T on chip) and the two-GEMM family (the GEMM engine's kernels over views of the
problem, T in scratch), on M not a multiple of the tile, rank in {16, 48, 64, 100} and beyond the fused limit,
d_in ≠ d_out, every activation, residual, both layouts, fp16 and bf16, fp32 (3xTF32 in the fused kernel, exact SIMT
in the two GEMMs), T kept in fp32 (hi + lo) or rounded to the dtype.

What the emulator proves: indexing, predication of ragged edges, the hand-over between the phases, fragments and
epilogues, for the exact source NVRTC compiles. What it cannot: timing, the asynchrony of cp.async, registers and
banks (the benchmark on a GPU covers those).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.ops.lowrank_mlp.families.fused import FUSED
from tracea_cli.ops.lowrank_mlp.families.fused_space import tiling
from tracea_cli.ops.lowrank_mlp.families.two_gemm import TWO_GEMM
from tracea_cli.ops.lowrank_mlp.problem import make_inputs, reference
from tracea_cli.ops.registry import get_op
from tracea_cli.ops.verify import check, relative_error

OP = get_op("lowrank-mlp")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def lowrank_emulator(emulator, tmp_path_factory):
    spec = importlib.util.spec_from_file_location("tracea_lowrank_harness", HERE / "emulator" / "lowrank_harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    workdir = tmp_path_factory.mktemp("lowrank-emulator")
    return harness, workdir, harness.build_launcher(workdir)


def _fused(bm, warps, wn1, bk, bn, wn2, stages=2, vec=8, min_blocks=1, stage_y=0, split_n=1):
    return {"family": "fused", "block_m": bm, "warps": warps, "warps_n1": wn1, "block_k": bk, "block_n": bn,
            "warps_n2": wn2, "stages": stages, "vec": vec, "min_blocks": min_blocks,
            "stage_y": stage_y, "split_n": split_n}


def _two(xu, tv):
    return {"family": "two_gemm", "xu_tile": xu, "tv_tile": tv}


# (problem fields, config): M ragged against block_m, d_in ragged against block_k and deeper than one stage, d_out
# ragged against block_n, every activation, residual with and without bias, both layouts, T in fp32 (hi + lo).
CASES = [
    (dict(m=40, d_in=64, rank=16, d_out=64, act="silu", residual=True), _fused(64, 4, 1, 32, 64, 2)),
    (dict(m=100, d_in=136, rank=48, d_out=72, act="relu", dtype="bf16"), _fused(64, 4, 1, 32, 64, 4, stages=3)),
    (dict(m=70, d_in=96, rank=64, d_out=80, act="gelu", layout="nt"), _fused(32, 4, 2, 32, 64, 2, vec=4)),
    (dict(m=33, d_in=100, rank=100, d_out=130, bias=False, act="none", residual=True, dtype="bf16"),
     _fused(64, 8, 2, 32, 64, 4, stages=3, vec=2)),
    (dict(m=65, d_in=72, rank=24, d_out=200, act="silu", intermediate="fp32"), _fused(128, 8, 1, 32, 128, 4, vec=8)),
    (dict(m=17, d_in=112, rank=100, d_out=100, act="relu", layout="nt", intermediate="fp32", dtype="bf16",
          residual=True), _fused(32, 4, 2, 32, 64, 4, vec=4)),
    # fp32 as 3xTF32 on tensor cores: the fp32 bound (1e-5) holds
    (dict(m=70, d_in=96, rank=48, d_out=80, dtype="fp32", act="silu", residual=True),
     _fused(64, 4, 1, 32, 64, 2, vec=4)),
    (dict(m=33, d_in=100, rank=20, d_out=45, dtype="fp32", layout="nt", act="gelu"),
     _fused(32, 4, 2, 32, 64, 4, stages=3, vec=4)),
    # several blocks, d_in and d_out ragged against the tiles, a 6-deep ring, and y staged through shared memory:
    # 16-byte rows, the ragged edge (d_out not a multiple of 8) element by element, the residual added after the
    # staged rounding, fp32's 4-float rows
    (dict(m=150, d_in=200, rank=48, d_out=200, act="silu", residual=True),
     _fused(64, 4, 1, 32, 64, 2, stages=6, stage_y=1)),
    (dict(m=100, d_in=96, rank=64, d_out=100, act="gelu", layout="nt", dtype="bf16"),
     _fused(32, 4, 2, 32, 64, 4, stages=3, vec=4, stage_y=1)),
    # 16 warps (512 threads): phase 1 a 8 x 2 warp grid of 16-row tiles, phase 2 4 x 4
    (dict(m=150, d_in=96, rank=64, d_out=200, act="gelu", residual=True), _fused(128, 16, 2, 32, 64, 4, stage_y=1)),
    # d_out shared among blocks (split_n): unequal shares (5 chunks over 2 and 3 blocks)
    (dict(m=70, d_in=64, rank=32, d_out=300, act="silu", residual=True), _fused(64, 4, 1, 32, 64, 2, vec=4, split_n=2,
                                                                                  stage_y=1)),
    (dict(m=40, d_in=64, rank=16, d_out=290, act="relu", dtype="bf16"), _fused(64, 4, 1, 32, 64, 2, vec=2, split_n=4)),
    (dict(m=90, d_in=160, rank=16, d_out=136, act="relu", intermediate="fp32"), _fused(64, 4, 1, 32, 64, 2)),
    (dict(m=70, d_in=96, rank=32, d_out=140, dtype="fp32", act="silu", residual=True),
     _fused(64, 4, 1, 32, 64, 2, vec=4, stage_y=1)),
    # the two-GEMM family: mma.sync (fp16, bf16) and SIMT (exact fp32), the rank in several column blocks of x·U
    (dict(m=70, d_in=96, rank=80, d_out=90, act="gelu"), _two("64x64x32/32x32/4", "32x32x32/16x16/3")),
    (dict(m=40, d_in=64, rank=40, d_out=72, layout="nt", dtype="bf16", residual=True),
     _two("32x32x32/16x16/3", "64x64x32/32x32/4")),
    (dict(m=37, d_in=52, rank=44, d_out=45, act="relu", dtype="fp32"), _two("32x32x8/16x32/2", "64x64x8/32x32/2")),
]


def _emulate(lowrank_emulator, p, config, seed, name):
    harness, workdir, launcher = lowrank_emulator
    family = FUSED if config["family"] == "fused" else TWO_GEMM
    smem = max(s.dynamic_smem_bytes for s in family.launch(p, config).kernels)
    exe = harness.build(family.source(p, config), smem, workdir / name, launcher)
    inputs = make_inputs(p, np.random.default_rng(seed))
    return harness.run(exe, p, family, config, inputs, workdir / name), reference(p, inputs)["y"]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[1]['family']}-{i}" for i, c in enumerate(CASES)])
def test_emulated_kernel_matches_the_reference(case, lowrank_emulator, sm80, sm90):
    fields, config = CASES[case]
    p = OP.problem(**{"dtype": "fp16", **fields})
    family = FUSED if config["family"] == "fused" else TWO_GEMM
    for target in (sm80, sm90):
        assert family.space(p, target).why_invalid(config) is None, (p.label, target.arch)
    y, ref = _emulate(lowrank_emulator, p, config, seed=case, name=f"case{case}")
    verdict = check(y, ref, p.dtype)
    assert verdict.ok, (p.label, config, verdict.reason)


def test_the_intermediate_kept_in_fp32_is_more_accurate_than_rounded(lowrank_emulator):
    """hi + lo keeps T to about 2^-17 in bf16: the result is measurably closer to the exact one than with T rounded
    to bf16 (both pass the bf16 bound)."""
    errors = {}
    for intermediate in ("fp32", "dtype"):
        p = OP.problem(m=64, d_in=256, rank=32, d_out=64, dtype="bf16", intermediate=intermediate)
        y, ref = _emulate(lowrank_emulator, p, _fused(64, 4, 1, 64, 64, 2), seed=11, name=f"t-{intermediate}")
        assert check(y, ref, "bf16").ok
        errors[intermediate] = relative_error(y, ref)
    assert errors["fp32"] < 0.8 * errors["dtype"], errors


def test_the_emulator_catches_a_wrong_kernel(lowrank_emulator, monkeypatch):
    """A T written one column off must fail the check: the emulation is not vacuous."""
    p = OP.problem(m=40, d_in=64, rank=32, d_out=64, dtype="fp16")
    config = _fused(64, 4, 1, 32, 64, 2)
    right = FUSED.source(p, config)
    wrong = right.replace("t_hi + row * F::LDT_S + col) = hi", "t_hi + row * F::LDT_S + (col ^ 2)) = hi")
    assert wrong != right
    harness, workdir, launcher = lowrank_emulator
    exe = harness.build(wrong, tiling(p, config).smem_bytes, workdir / "wrong", launcher)
    inputs = make_inputs(p, np.random.default_rng(0))
    y = harness.run(exe, p, FUSED, config, inputs, workdir / "wrong")
    assert not check(y, reference(p, inputs)["y"], "fp16").ok


def test_the_emulator_catches_an_xu_block_that_ignores_its_rank_block(lowrank_emulator):
    """x·U's grid y picks the rank's column block: a kernel that always takes the first one must fail."""
    p = OP.problem(m=70, d_in=96, rank=80, d_out=90, act="gelu", dtype="fp16")
    config = _two("64x64x32/32x32/4", "32x32x32/16x16/3")
    right = TWO_GEMM.source(p, config)
    wrong = right.replace("const int c0 = blockIdx.y * G::BLOCK_N;", "const int c0 = 0 * blockIdx.y;")
    assert wrong != right
    harness, workdir, launcher = lowrank_emulator
    smem = max(s.dynamic_smem_bytes for s in TWO_GEMM.launch(p, config).kernels)
    inputs = make_inputs(p, np.random.default_rng(1))
    for name, source, ok in (("xu_right", right, True), ("xu_wrong", wrong, False)):
        exe = harness.build(source, smem, workdir / name, launcher)
        y = harness.run(exe, p, TWO_GEMM, config, inputs, workdir / name)
        assert check(y, reference(p, inputs)["y"], "fp16").ok == ok, name


def test_fp32_needs_all_three_tf32_products(lowrank_emulator):
    """3xTF32 is what keeps fp32 accuracy: without the cross terms (plain TF32 products) the fp32 check fails."""
    p = OP.problem(m=64, d_in=256, rank=32, d_out=64, dtype="fp32")
    config = _fused(64, 4, 1, 32, 64, 2, vec=4)
    harness, workdir, launcher = lowrank_emulator
    inputs = make_inputs(p, np.random.default_rng(3))
    ref = reference(p, inputs)["y"]
    verdicts = {}
    split = FUSED.source(p, config)
    plain = split.replace("mma_16x8<float>(acc[i][j], big.a[i], small.b[j]);", "").replace(
        "mma_16x8<float>(acc[i][j], small.a[i], big.b[j]);", "")
    assert plain != split
    for name, source in (("3xtf32", split), ("tf32", plain)):
        exe = harness.build(source, tiling(p, config).smem_bytes, workdir / f"fp32-{name}", launcher)
        verdicts[name] = check(harness.run(exe, p, FUSED, config, inputs, workdir / f"fp32-{name}"), ref, "fp32")
    assert verdicts["3xtf32"].ok and verdicts["3xtf32"].rel_error < 2e-6, verdicts["3xtf32"]
    assert not verdicts["tf32"].ok and verdicts["tf32"].rel_error > 1e-4, verdicts["tf32"]
