"""The CUDA conv2d kernels' own code (kernels/cuda/conv2d_implicit.cuh, on the GEMM engine's tiles), run on the CPU by
the host emulator following each configuration's launch plan, and checked against the float64 reference.

What it proves, for the exact source NVRTC compiles: the im2col gather of every iterator (pixel decode by fast
divmod, padding by predication, stride, dilation, the tap masks, FewChannels' per-element decode), the filter tiles,
split-K and its reduction, the epilogues and the NCHW transpose. What it cannot: timing and the asynchrony of cp.async.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tracea_cli.ops.conv2d.families.implicit_gemm import TRANSPOSE_FLAG, conv2d_args, conv2d_launch, conv2d_source
from tracea_cli.ops.conv2d.families.implicit_gemm_space import conv2d_space
from tracea_cli.ops.conv2d.problem import Conv2dProblem, make_inputs, reference
from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.launch import KernelStep
from tracea_cli.ops.verify import check


def _mma(bm, bn, bk, wm, wn, stages, vec, iterator, split_k=1, group_m=1):
    return {"family": "mma", "block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn,
            "stages": stages, "vec": vec, "iterator": iterator, "split_k": split_k, "group_m": group_m}


def _simt(bm, bn, bk, wm, wn, vec, iterator, split_k=1, group_m=1):
    return {**_mma(bm, bn, bk, wm, wn, 2, vec, iterator, split_k, group_m), "family": "simt"}


def _p(n, h, w, c, k, r, s, stride=(1, 1), pad=(0, 0), dilation=(1, 1), dtype="fp16", epilogue="none"):
    return Conv2dProblem(n, h, w, c, k, r, s, *stride, *pad, *dilation, dtype=dtype, epilogue=epilogue)


# (problem, config): every iterator and dtype path, each epilogue, odd H and W, stride 2, dilation 2, padding 0-3,
# C in {3, 12, 16, 100}, odd K, split-K, tile order, 2-4 stages, vector widths down to single 16-bit elements.
CASES = [
    (_p(2, 9, 11, 12, 37, 3, 3, (1, 2), (1, 0), (1, 2), epilogue="bias_relu"), _mma(64, 32, 16, 32, 16, 3, 4, "analytic")),
    (_p(2, 9, 11, 12, 37, 3, 3, (1, 2), (1, 0), (1, 2), epilogue="bias_relu"), _mma(64, 32, 16, 32, 16, 4, 4, "optimized", split_k=2)),
    (_p(1, 13, 13, 3, 17, 7, 7, (2, 2), (3, 3), dtype="bf16", epilogue="bias"), _mma(64, 32, 32, 32, 16, 4, 1, "few_channels")),
    (_p(1, 15, 9, 3, 8, 3, 3, (2, 1), (2, 1), (2, 2), epilogue="bias_silu"), _mma(32, 32, 16, 16, 16, 2, 1, "few_channels", split_k=2)),
    (_p(2, 7, 6, 16, 33, 1, 1, dtype="bf16", epilogue="bias_residual"), _mma(32, 64, 16, 16, 32, 2, 8, "optimized")),
    (_p(1, 12, 12, 100, 19, 3, 3, pad=(2, 2), dilation=(2, 2), epilogue="bias_residual_relu"), _mma(32, 32, 32, 32, 32, 3, 4, "optimized", group_m=4)),
    (_p(2, 9, 8, 16, 20, 3, 2, (2, 1), (2, 1), (2, 1), dtype="tf32", epilogue="bias_residual"), _mma(32, 32, 16, 16, 16, 2, 4, "analytic")),
    (_p(1, 11, 10, 12, 9, 5, 3, (1, 1), (3, 0), dtype="tf32", epilogue="bias_silu"), _mma(32, 32, 16, 16, 16, 3, 1, "few_channels", split_k=2)),
    (_p(1, 9, 9, 13, 24, 3, 3, pad=(1, 1), epilogue="none"), _mma(32, 32, 16, 16, 16, 2, 1, "analytic")),  # 2-byte copies
    (_p(2, 9, 11, 12, 37, 3, 3, (1, 2), (1, 0), (1, 2), dtype="fp32", epilogue="bias_silu"), _simt(32, 32, 8, 16, 32, 4, "optimized")),
    (_p(1, 7, 7, 3, 33, 3, 3, (2, 2), (3, 3), dtype="fp32", epilogue="bias_residual_relu"), _simt(32, 32, 8, 16, 32, 1, "few_channels", split_k=2)),
    (_p(4, 10, 9, 20, 40, 3, 3, pad=(1, 1), dtype="fp32", epilogue="bias"), _simt(64, 32, 8, 64, 32, 4, "analytic", group_m=4)),
]


SLOW = not os.environ.get("TRACEA_SLOW_TESTS")
# the default run takes one case of each kind; TRACEA_SLOW_TESTS=1 runs them all
QUICK = (0, 2, 5, 6, 10)


@pytest.fixture(scope="module")
def plan_emulator(emulator):
    harness, workdir, _ = emulator
    return harness, workdir, harness.build_plan_launcher(workdir)


def _operands(problem, seed, *, nchw: bool = False):
    """Inputs and the family's arguments; with `nchw`, X and the filter as torch's default layouts (NCHW, KCRS), as
    the exported call passes them: the transposes fill the kernel's X and filter (poisoned here) first."""
    inputs = make_inputs(problem, np.random.default_rng(seed))
    ops = {name: to_storage(values, problem.dtype) for name, values in inputs.items()}
    ops["Y"] = to_storage(np.full(problem.out_shape, np.nan), problem.dtype)
    values = conv2d_args(problem, ops)
    if nchw:
        values = {**values, "X_nchw": np.ascontiguousarray(ops["X"].transpose(0, 3, 1, 2)),
                  "X": to_storage(np.full(ops["X"].shape, np.nan), problem.dtype), TRANSPOSE_FLAG: 1,
                  "filter_kcrs": np.ascontiguousarray(ops["W"].transpose(0, 3, 1, 2)),
                  "filter": to_storage(np.full(ops["W"].shape, np.nan), problem.dtype), "filter_is_kcrs": 1}
    return inputs, values


def _verdict(plan_emulator, problem, config, name, *, seed=0, source=None, nchw=False):
    harness, workdir, launcher = plan_emulator
    plan = conv2d_launch(problem, config)
    inputs, values = _operands(problem, seed, nchw=nchw)
    exe = harness.build_plan(source or conv2d_source(problem, config), plan, values, workdir / name, launcher)
    out = harness.run_plan(exe, plan, values, ("Y",), workdir / name)
    return check(from_storage(out["Y"], problem.dtype), reference(problem, inputs)["Y"], problem.dtype)


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{c[1]['family']}-{c[0].dtype}-{c[1]['iterator']}-{c[0].epilogue}" for c in CASES])
def test_emulated_kernel_matches_the_reference(case, plan_emulator, sm90):
    if SLOW and case not in QUICK:
        pytest.skip("opt in: TRACEA_SLOW_TESTS=1")
    problem, config = CASES[case]
    assert conv2d_space(problem, sm90).why_invalid(config) is None
    verdict = _verdict(plan_emulator, problem, config, f"conv{case}", seed=case)
    assert verdict.ok, verdict.reason


def test_an_nchw_input_and_a_kcrs_filter_are_transposed_first(plan_emulator, sm90):
    """The steps that run only when `x_is_nchw` and `filter_is_kcrs` are set fill X and the filter (poisoned) from copies
    in torch's default layouts."""
    problem, config = CASES[4]
    verdict = _verdict(plan_emulator, problem, config, "nchw", seed=11, nchw=True)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("old,new,case", [
    # the filter's dilation left out of the optimized iterator's tap offset
    ("return (static_cast<long long>(r * Geo::DILATION_H) * cs.w + s * Geo::DILATION_W) * cs.c + c;",
     "return (static_cast<long long>(r) * cs.w + s) * cs.c + c;", 5),
    # FewChannels decodes an element's channel from the wrong remainder
    ("k.offset[e] = tap_offset<Geo>(cs, rs.x, rs.y, rs_c.y);", "k.offset[e] = tap_offset<Geo>(cs, rs.x, rs.y, 0);", 10),
], ids=["dilation", "few-channels-decode"])
def test_the_emulator_catches_a_wrong_gather(old, new, case, plan_emulator):
    if SLOW and case not in QUICK:
        pytest.skip("opt in: TRACEA_SLOW_TESTS=1")
    problem, config = CASES[case]
    right = conv2d_source(problem, config)
    wrong = right.replace(old, new)
    assert wrong != right
    verdict = _verdict(plan_emulator, problem, config, f"wrong{case}", seed=case, source=wrong)
    assert not verdict.ok


# ---- serial split-K: one launch, the last slice of each tile finishes it and leaves the workspace zero --------------

# (problem, config): every epilogue, splits 2, 4 and 8, ragged reductions (steps not a multiple of the split: the last
# slice shorter), ragged tiles (M and K not multiples of the tile), both families, every iterator, tile order.
SERIAL_CASES = [
    (_p(1, 9, 11, 12, 37, 3, 3, (1, 2), (1, 0), (1, 2), epilogue="bias_relu"),
     _mma(64, 32, 16, 32, 16, 2, 4, "optimized", split_k=2)),
    (_p(1, 7, 7, 24, 40, 3, 3, pad=(1, 1), dtype="bf16", epilogue="bias_residual_relu"),
     _mma(32, 32, 16, 16, 16, 2, 8, "analytic", split_k=4)),
    (_p(1, 5, 6, 40, 20, 3, 3, pad=(1, 1), epilogue="bias_residual"),
     _mma(32, 32, 16, 16, 16, 2, 8, "optimized", split_k=4)),
    (_p(1, 15, 9, 3, 8, 3, 3, (2, 1), (2, 1), (2, 2), epilogue="bias_silu"),
     _mma(32, 32, 16, 16, 16, 2, 1, "few_channels", split_k=2)),
    (_p(1, 11, 10, 12, 9, 5, 3, (1, 1), (3, 0), dtype="tf32", epilogue="bias_silu"),
     _mma(32, 32, 16, 16, 16, 2, 4, "analytic", split_k=8)),
    (_p(1, 9, 9, 13, 24, 3, 3, pad=(1, 1), epilogue="none"), _mma(32, 32, 16, 16, 16, 2, 1, "analytic", split_k=2)),
    (_p(2, 9, 8, 20, 33, 3, 3, pad=(1, 1), dtype="fp32", epilogue="bias"),
     _simt(32, 32, 8, 16, 32, 4, "optimized", split_k=4, group_m=4)),
    (_p(1, 7, 7, 3, 33, 3, 3, (2, 2), (3, 3), dtype="fp32", epilogue="bias_residual_relu"),
     _simt(32, 32, 8, 16, 32, 1, "few_channels", split_k=2)),
]
SERIAL_QUICK = (1, 4, 6)
# serial_ordered (one part of the workspace per slice, summed in order) on these cases too; all with TRACEA_SLOW_TESTS
ORDERED_QUICK = (1, 6)


def _serial(config, mode="serial"):
    return {**config, "splitk_mode": mode}


@pytest.mark.parametrize("mode", ["serial", "serial_ordered"])
@pytest.mark.parametrize("case", range(len(SERIAL_CASES)), ids=[
    f"{c[1]['family']}-{c[0].dtype}-{c[1]['iterator']}-{c[0].epilogue}-split{c[1]['split_k']}" for c in SERIAL_CASES])
def test_serial_split_k_matches_the_reference_twice_and_leaves_the_workspace_zero(case, mode, plan_emulator, sm90):
    """Two calls on one workspace zeroed once (a garbage allocation, then the plan's `once` memset, then no memset
    between calls): both match the reference, and after each the whole workspace (sums and tile counters) is zero.
    The emulator runs blocks one by one, slice-major, so every tile's slices 0 .. split-2 arrive, see they are not
    last and leave, and the last one finishes the tile."""
    if SLOW and case not in (SERIAL_QUICK if mode == "serial" else ORDERED_QUICK):
        pytest.skip("opt in: TRACEA_SLOW_TESTS=1")
    problem, config = SERIAL_CASES[case]
    config = _serial(config, mode)
    assert conv2d_space(problem, sm90).why_invalid(config) is None
    plan = conv2d_launch(problem, config)
    assert [type(s).__name__ for s in plan.steps if not isinstance(s, KernelStep) or s.when is None] == \
        ["MemsetStep", "KernelStep"] and plan.steps[2].once
    harness, workdir, launcher = plan_emulator
    inputs, values = _operands(problem, 100 + case)
    folder = workdir / f"{mode}{case}"
    exe = harness.build_plan(conv2d_source(problem, config), plan, values, folder, launcher)
    out = harness.run_plan(exe, plan, values, ("Y",), folder, calls=2, keep_workspace=True)
    want = reference(problem, inputs)["Y"]
    for call in (1, 2):
        verdict = check(from_storage(out[f"Y@{call}"], problem.dtype), want, problem.dtype)
        assert verdict.ok, f"call {call}: {verdict.reason}"
    assert out["workspace"].size == plan.workspace_bytes(values) and not out["workspace"].any()
    assert np.array_equal(out["Y@1"].view(np.uint8), out["Y@2"].view(np.uint8))  # same inputs, same bits


def test_serial_split_k_without_its_reset_leaves_the_workspace_dirty_and_the_second_call_wrong(plan_emulator, sm90):
    """The test above can fail: a kernel that forgets to zero its tile after finishing it gives a right first call
    and a wrong second one (the first call's sums still there)."""
    problem, config = SERIAL_CASES[0]
    config = _serial(config)
    right = conv2d_source(problem, config)
    wrong = right.replace("TRACEA_STORE_L2(sum + z * mn, 0.0f);", "")
    assert wrong != right
    harness, workdir, launcher = plan_emulator
    plan = conv2d_launch(problem, config)
    inputs, values = _operands(problem, 7)
    exe = harness.build_plan(wrong, plan, values, workdir / "serial-noreset", launcher)
    out = harness.run_plan(exe, plan, values, ("Y",), workdir / "serial-noreset", calls=2, keep_workspace=True)
    want = reference(problem, inputs)["Y"]
    assert check(from_storage(out["Y@1"], problem.dtype), want, problem.dtype).ok
    assert not check(from_storage(out["Y@2"], problem.dtype), want, problem.dtype).ok
    assert out["workspace"].any()


def test_serial_split_k_finishes_a_tile_only_once_all_its_slices_arrived(plan_emulator, sm90):
    """A kernel that takes the first arrival for the last finishes every tile from slice 0's sums alone: wrong."""
    problem, config = SERIAL_CASES[1]
    config = _serial(config)
    right = conv2d_source(problem, config)
    wrong = right.replace("atomicAdd(counter, 1) == G::SPLIT_K - 1", "atomicAdd(counter, 1) == 0")
    assert wrong != right
    verdict = _verdict(plan_emulator, problem, config, "serial-first", seed=3, source=wrong)
    assert not verdict.ok


def test_serial_ordered_sums_the_slices_parts_in_slice_order(plan_emulator, sm90):
    """Each slice of serial_ordered adds into its own part of the workspace; a finish that reads part 0 alone misses
    the other slices' parts: wrong."""
    problem, config = SERIAL_CASES[1]
    config = _serial(config, "serial_ordered")
    right = conv2d_source(problem, config)
    wrong = right.replace("for (int z = 0; z < PARTS; ++z) {", "for (int z = 0; z < 1; ++z) {")
    assert wrong != right
    verdict = _verdict(plan_emulator, problem, config, "ordered-one-part", seed=4, source=wrong)
    assert not verdict.ok
