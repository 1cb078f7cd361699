"""The gemv kernel's split-K in one launch (splitk_mode "serial", kernels/cuda/gemm_gemv_serial.cuh): its space rules,
its sources and plans beside the two-launch sum's, and its code run on the CPU by the host emulator, two calls on one
workspace, against the reference and bit for bit against the two-launch sum."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.gemm.families.engine import SUM_KERNEL, gemm_args, gemm_launch, gemm_source
from tracea_cli.ops.gemm.families.engine_space import gemm_space, tiling
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES, GemmProblem, make_inputs, reference
from tracea_cli.ops.launch import KernelStep, MemsetStep
from tracea_cli.ops.verify import check


def _gemv(rows, bn, bk, vec=1, split_k=1, mode=None):
    config = {"family": "simt", "kernel": "gemv", "block_m": rows, "block_n": bn, "block_k": bk, "warp_m": 16,
              "warp_n": 32, "stages": 2, "split_k": split_k, "group_m": 1, "vec": vec}
    return config if mode is None else {**config, "splitk_mode": mode}


# ((m, n, k), epilogue, config): M 1, 3 and 16 (3 and 13 ragged in their blocks), N and K not multiples of the tile,
# every split count the space has, the last slice shorter than the others, every epilogue, every vector width.
CASES = [
    ((1, 45, 300), "none", _gemv(1, 32, 16, split_k=4)),
    ((1, 130, 1000), "bias_gelu", _gemv(1, 64, 64, vec=2, split_k=8)),
    ((3, 130, 200), "bias", _gemv(4, 64, 64, vec=2, split_k=2)),
    ((3, 36, 333), "bias_relu", _gemv(4, 32, 128, split_k=2)),
    ((16, 68, 100), "bias_residual", _gemv(16, 64, 64, vec=4, split_k=2)),
    ((16, 200, 900), "bias_silu", _gemv(16, 128, 32, vec=4, split_k=8)),
    ((13, 40, 1500), "bias_gelu", _gemv(8, 32, 32, vec=4, split_k=16)),
]


def test_the_cases_cover_every_epilogue_and_split():
    assert {e for _, e, _ in CASES} == set(EPILOGUE_NAMES)
    assert {c["split_k"] for _, _, c in CASES} == {2, 4, 8, 16} and {s[0] for s, _, _ in CASES} >= {1, 3, 16}


# ---- space, source, plan ---------------------------------------------------------------------------------------------

def test_splitk_mode_is_offered_only_where_gemv_is(sm90):
    assert gemm_space(GemmProblem(16, 4096, 4096, "fp32"), sm90).param("splitk_mode").values == ("sum", "serial")
    for problem in (GemmProblem(17, 4096, 4096, "fp32"), GemmProblem(16, 4096, 4096, "fp16")):
        assert "splitk_mode" not in gemm_space(problem, sm90).names


def test_the_space_rules_say_why(sm90):
    space = gemm_space(GemmProblem(16, 4096, 4096, "fp32"), sm90)
    tiled = {"family": "simt", "kernel": "tiled", "block_m": 32, "block_n": 64, "block_k": 16, "warp_m": 16,
             "warp_n": 32, "stages": 2, "split_k": 4, "group_m": 1, "vec": 4}
    assert space.why_invalid(tiled) is None
    assert "tiled kernel sums its slices" in space.why_invalid({**tiled, "splitk_mode": "serial"})
    gemv = _gemv(16, 128, 32, vec=4, split_k=8)
    assert space.why_invalid({**gemv, "splitk_mode": "serial"}) is None
    assert "split_k=1 has none" in space.why_invalid({**gemv, "split_k": 1, "splitk_mode": "serial"})
    assert "is not one of" in space.why_invalid({**gemv, "splitk_mode": "atomic"})
    serial = [c for c in space.valid_configs() if c["splitk_mode"] == "serial"]
    assert serial and all(c["kernel"] == "gemv" and c["split_k"] > 1 for c in serial)
    assert {**serial[0], "splitk_mode": "sum"} in space.valid_configs()  # every serial one has its two-launch twin


def test_sum_names_nothing_new_the_source_and_plan_of_before():
    """splitk_mode "sum" is the configuration that lacks the parameter: the same text (and binary) and plan."""
    problem = GemmProblem(16, 200, 900, "fp32", epilogue="bias_silu")
    for config in (_gemv(16, 128, 32, vec=4, split_k=8), _gemv(16, 128, 32, vec=4)):
        assert gemm_source(problem, {**config, "splitk_mode": "sum"}) == gemm_source(problem, config)
        assert gemm_launch(problem, {**config, "splitk_mode": "sum"}) == gemm_launch(problem, config)
        assert "splitk_mode" not in gemm_source(problem, config) and "gemm_gemv_serial" not in \
            gemm_source(problem, config)


def test_serial_is_one_launch_with_its_counters_zeroed_once():
    problem = GemmProblem(16, 200, 900, "fp32")
    config = _gemv(16, 128, 32, vec=4, split_k=8, mode="serial")
    plan, source = gemm_launch(problem, config), gemm_source(problem, config)
    kernels = [s for s in plan.steps if isinstance(s, KernelStep)]
    assert [s.name for s in kernels] == ["gemm_main"] and kernels[0].grid == ("tiles", 1, "split_k")
    assert [s for s in plan.steps if isinstance(s, MemsetStep)] == [MemsetStep(elem_bytes=4, once=True)]
    assert plan.workspace_bytes_per_mn == 4 * 9 and f" {SUM_KERNEL}(TRACEA_GEMM_PARAMS)" not in source
    assert "tracea::gemm_gemv_serial<Gemm>" in source and '"splitk_mode":"serial"' in source


# ---- the emulator ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_emulator(emulator):
    harness, workdir, _ = emulator
    return harness, workdir, harness.build_plan_launcher(workdir)


def _run(plan_emulator, problem, config, seed, name, *, source=None, calls=2):
    harness, workdir, launcher = plan_emulator
    inputs = make_inputs(problem, np.random.default_rng(seed))
    operands = {k: to_storage(v, problem.dtype) for k, v in inputs.items()}
    operands["C"] = to_storage(np.full((problem.m, problem.n), np.nan), problem.dtype)
    values = gemm_args(problem, operands)
    plan = gemm_launch(problem, config)
    exe = harness.build_plan(source or gemm_source(problem, config), plan, values, workdir / name, launcher)
    out = harness.run_plan(exe, plan, values, ("C",), workdir / name, calls=calls, keep_workspace=True)
    return out, reference(problem, inputs)["C"], plan.workspace_bytes(values)


def _verdict(out, want, call):
    return check(from_storage(out[f"C@{call}"], "fp32"), want, "fp32")


QUICK = (0, 2, 5)  # M 1, 3 and 16, splits 4, 2 and 8; TRACEA_SLOW_TESTS=1 runs every case


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{c[1]}-split{c[2]['split_k']}" for c in CASES])
def test_serial_matches_the_reference_twice_leaves_the_counters_zero_and_the_sums_bits(case, plan_emulator, sm90):
    """Two calls on one workspace (a garbage allocation, the plan's `once` memset, no memset between calls): both
    match the reference; after each the counters (the workspace's first 4·M·N bytes) are zero; and C is bit for bit
    what the two-launch sum gives (the same additions in the same order)."""
    if case not in QUICK and not os.environ.get("TRACEA_SLOW_TESTS"):
        pytest.skip("opt in: TRACEA_SLOW_TESTS=1")
    shape, epilogue, config = CASES[case]
    problem = GemmProblem(*shape, dtype="fp32", layout="nn", epilogue=epilogue)
    serial = {**config, "splitk_mode": "serial"}
    assert gemm_space(problem, sm90).why_invalid(serial) is None
    out, want, workspace_bytes = _run(plan_emulator, problem, serial, seed=200 + case, name=f"gemv-serial{case}")
    for call in (1, 2):
        verdict = _verdict(out, want, call)
        assert verdict.ok, f"call {call}: {verdict.reason}"
    mn = problem.m * problem.n
    assert out["workspace"].size == workspace_bytes == 4 * mn * (config["split_k"] + 1)
    assert not out["workspace"][:4 * mn].any()
    assert np.array_equal(out["C@1"].view(np.uint32), out["C@2"].view(np.uint32))
    summed, _, _ = _run(plan_emulator, problem, config, seed=200 + case, name=f"gemv-sum{case}", calls=1)
    assert np.array_equal(out["C@1"].view(np.uint32), summed["C@1"].view(np.uint32))


def _mutant(problem, config, old, new):
    right = gemm_source(problem, config)
    wrong = right.replace(old, new)
    assert wrong != right
    return wrong


def test_a_serial_sum_that_drops_a_slice_fails(plan_emulator):
    problem = GemmProblem(3, 130, 200, "fp32", epilogue="bias")
    config = _gemv(4, 64, 64, vec=2, split_k=2, mode="serial")
    wrong = _mutant(problem, config, "slice < G::SPLIT_K; ++slice", "slice < G::SPLIT_K - 1; ++slice")
    out, want, _ = _run(plan_emulator, problem, config, seed=11, name="gemv-serial-drop", source=wrong, calls=1)
    assert not _verdict(out, want, 1).ok


def test_a_serial_finish_before_the_last_arrival_fails(plan_emulator):
    """The next-to-last slice to arrive finishing the block sums a part the last slice has not written yet (the
    allocation's garbage), and the last one, not told it is last, leaves it so. (A finish by the first arrival would
    not do: it resets the counter, so every later slice finishes again, the last with every part written.)"""
    problem, config = GemmProblem(1, 45, 300, "fp32"), _gemv(1, 32, 16, split_k=4, mode="serial")
    wrong = _mutant(problem, config, "atomicAdd(counter, 1) == slices - 1", "atomicAdd(counter, 1) == slices - 2")
    out, want, _ = _run(plan_emulator, problem, config, seed=12, name="gemv-serial-first", source=wrong, calls=1)
    assert not _verdict(out, want, 1).ok


def test_a_serial_kernel_that_keeps_its_counters_gets_the_second_call_wrong(plan_emulator):
    """Without the reset the first call is right, the counters stay at SPLIT_K and no block of the second call is
    last: C keeps the poison the harness reloads before it."""
    problem, config = GemmProblem(16, 68, 100, "fp32", epilogue="bias_residual"), \
        _gemv(16, 64, 64, vec=4, split_k=2, mode="serial")
    wrong = _mutant(problem, config, "release_arrival(counter);\n", "\n")
    out, want, _ = _run(plan_emulator, problem, config, seed=13, name="gemv-serial-noreset", source=wrong)
    assert _verdict(out, want, 1).ok and not _verdict(out, want, 2).ok
    assert out["workspace"][:4 * problem.m * problem.n].any()


# ---- the benchmark (benchmarks/gemm_fp32_h200.py): both modes measured side by side -------------------------------

def test_the_fp32_benchmark_measures_every_split_gemv_configuration_in_both_modes(sm90):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm_fp32_h200.py"
    spec = importlib.util.spec_from_file_location("gemm_fp32_h200", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for m in (1, 16):
        configs = bench.configurations(GemmProblem(m, 4096, 4096, "fp32"), sm90)
        split = [c for c in configs if c.get("kernel") == "gemv" and c["split_k"] > 1]
        assert configs[0]["splitk_mode"] == "serial" and configs[1] == {**configs[0], "splitk_mode": "sum"}
        rows = [{"config": c, "median_ms": 1.0} for c in configs]
        pairs = bench.mode_pairs(rows)
        sums = [c for c in split if c.get("splitk_mode", "sum") == "sum"]
        assert len(pairs) == len(sums) >= 4
        assert all(one["config"] == {**two["config"], "splitk_mode": "serial"} for two, one in pairs)
        ahead = [c for c in split if c.get("prefetch") == 1]  # each prefetching one beside its twin without
        prefetch_pairs = bench.twin_pairs(rows, "prefetch", 0, 1)
        assert len(prefetch_pairs) == len(ahead) >= 4 and len(split) == 3 * len(ahead)
        assert all(one["config"] == {**zero["config"], "prefetch": 1} for zero, one in prefetch_pairs)
        assert any(c["family"] == "mma" for c in configs)  # 3xTF32 beside them
        assert all(c["family"] == "simt" for c in bench.configurations(GemmProblem(m, 4096, 4096, "fp32"), sm90,
                                                                         ("simt",)))


# ---- on a GPU (marked `gpu`: skipped with the reason where CuPy or a CUDA device is missing) ----------------------

@pytest.mark.gpu
def test_serial_cases_and_picks_are_right_on_the_gpu(gpu_target):
    """The emulator's cases in both modes, and the hand-picked serial configurations of M = 1, 3 and 16 over
    N = K = 4096 with every epilogue, checked against the float64 reference (each check binds afresh: a workspace
    zeroed once at allocation, one launch)."""
    from tracea_cli.backends.op_backend import OpBackend
    from tracea_cli.ops.gemm.families.engine_space import hand_picked

    backend = OpBackend("gemm", "cuda")
    jobs = [(GemmProblem(*s, dtype="fp32", epilogue=e), {**c, "splitk_mode": mode}) for s, e, c in CASES
            for mode in ("serial", "sum")]
    for m in (1, 3, 16):
        for epilogue in EPILOGUE_NAMES:
            problem = GemmProblem(m, 4096, 4096, "fp32", epilogue=epilogue)
            jobs += [(problem, c) for c in hand_picked(problem, gpu_target, limit=2) if c["splitk_mode"] == "serial"]
    assert len(jobs) == 2 * len(CASES) + 3 * len(EPILOGUE_NAMES)
    failures = []
    for problem, config in jobs:
        artifact = backend.compile(problem, config, gpu_target)
        ev = backend.check(artifact, problem, gpu_target, seed=problem.m * 31 + problem.k)
        if not ev.ok:
            failures.append(f"{problem.label} {config}: {ev.status.value}: {ev.reason}")
    assert not failures, failures


@pytest.mark.gpu
@pytest.mark.parametrize("m", (1, 16))
def test_serial_repeated_calls_stay_right_leave_the_counters_zero_and_match_the_sum_bit_for_bit(m, gpu_target):
    """One bound launch of the serial pick called 30 times on new inputs (same pointers): every C matches the
    reference, the counters are zero after every call, and C is bit for bit the two-launch sum's (bound beside it
    over the same arrays); then 20 more calls on the same inputs give one bit pattern."""
    import cupy

    from tracea_cli.backends import cuda
    from tracea_cli.backends.op_backend import OpBackend
    from tracea_cli.ops.gemm.families.engine_space import hand_picked

    backend = OpBackend("gemm", "cuda")
    problem = GemmProblem(m, 4096, 4096, "fp32", epilogue="bias_gelu")
    serial, summed = hand_picked(problem, gpu_target, limit=2)
    assert serial["splitk_mode"] == "serial" and summed == {**serial, "splitk_mode": "sum"}
    rng = np.random.default_rng(9)
    first = make_inputs(problem, rng)
    device = {n: cupy.asarray(to_storage(v, "fp32")) for n, v in first.items()}
    device["C"] = cupy.full((m, problem.n), np.nan, dtype=np.float32)
    c_sum = cupy.full((m, problem.n), np.nan, dtype=np.float32)
    bound = cuda.bind(cuda.load(backend.compile(problem, serial, gpu_target)), gemm_args(problem, device))
    bound_sum = cuda.bind(cuda.load(backend.compile(problem, summed, gpu_target)),
                          gemm_args(problem, {**device, "C": c_sum}))
    workspace = next(k for k in bound._keep if isinstance(k, cupy.ndarray))
    counters = workspace[:4 * m * problem.n]
    for call in range(30):
        inputs = first if call == 0 else make_inputs(problem, rng)
        for name, values in inputs.items():
            device[name][...] = cupy.asarray(to_storage(values, "fp32"))
        device["C"].fill(np.nan)
        bound()
        bound_sum()
        cupy.cuda.get_current_stream().synchronize()
        got = cupy.asnumpy(device["C"])
        verdict = check(got.astype(np.float64), reference(problem, inputs)["C"], "fp32")
        assert verdict.ok, f"call {call}: {verdict.reason}"
        assert not bool(counters.any()), f"call {call} left a counter set"
        assert np.array_equal(got.view(np.uint32), cupy.asnumpy(c_sum).view(np.uint32)), f"call {call}"
    outputs = set()
    for _ in range(20):
        bound()
        outputs.add(cupy.asnumpy(device["C"]).tobytes())
    assert len(outputs) == 1


def test_the_gemm_emulator_harness_runs_the_serial_mode(emulator, sm90):
    """The GEMM launcher (harness.build/run, the opt-in random sweep's) sizes the workspace from the plan, so a serial
    gemv configuration runs there too (one kernel, gemm_main). The two-launch sum does not: that launcher knows
    gemm_main and gemm_splitk_reduce only, not gemm_splitk_sum (as before this mode; the plan launcher runs it)."""
    harness, workdir, launcher = emulator
    problem = GemmProblem(3, 130, 200, "fp32", epilogue="bias")
    inputs = make_inputs(problem, np.random.default_rng(21))
    for mode in ("serial",):
        config = _gemv(4, 64, 64, vec=2, split_k=4, mode=mode)
        assert gemm_space(problem, sm90).why_invalid(config) is None
        exe = harness.build(problem, config, workdir / f"gemv-harness-{mode}", launcher)
        out = harness.run(exe, problem, config, inputs, workdir / f"gemv-harness-{mode}")
        verdict = check(out, reference(problem, inputs)["C"], "fp32")
        assert verdict.ok, f"{mode}: {verdict.reason}"


# ---- prefetch: the next step's B in a second set of registers (kernels/cuda/gemm_gemv.cuh, PREFETCH) ----------------

def test_prefetch_is_offered_only_where_gemv_is_and_only_for_it(sm90):
    space = gemm_space(GemmProblem(1, 4096, 4096, "fp32"), sm90)
    assert space.param("prefetch").values == (0, 1)
    for problem in (GemmProblem(17, 4096, 4096, "fp32"), GemmProblem(1, 4096, 4096, "fp16")):
        assert "prefetch" not in gemm_space(problem, sm90).names
    gemv = _gemv(1, 128, 64, vec=4, split_k=8)
    assert space.why_invalid({**gemv, "prefetch": 1}) is None
    tiled = {"family": "simt", "kernel": "tiled", "block_m": 32, "block_n": 64, "block_k": 16, "warp_m": 16,
             "warp_n": 32, "stages": 2, "split_k": 4, "group_m": 1, "vec": 4}
    assert "the gemv kernel's" in space.why_invalid({**tiled, "prefetch": 1})
    # twice the B registers in the estimate: a configuration the estimate admits without prefetch may not fit with it
    assert tiling(GemmProblem(1, 4096, 4096, "fp32"), {**gemv, "prefetch": 1}).estimated_regs == \
        tiling(GemmProblem(1, 4096, 4096, "fp32"), gemv).estimated_regs + 8 * 4


def test_prefetch_0_is_the_source_of_before_and_1_its_own_instantiation():
    problem = GemmProblem(1, 4096, 4096, "fp32")
    config = _gemv(1, 128, 64, vec=4, split_k=8, mode="serial")
    assert gemm_source(problem, {**config, "prefetch": 0}) == gemm_source(problem, config)
    prefetching = gemm_source(problem, {**config, "prefetch": 1})
    assert "1, 128, 64, 4, 8, 1>" in prefetching and "prefetch" in prefetching.splitlines()[1]
    assert gemm_launch(problem, {**config, "prefetch": 1}) == gemm_launch(problem, config)


def test_prefetching_gemv_compiles_without_spills_for_sm90(make_target):
    from tracea_cli.backends.op_backend import OpBackend

    target = make_target("sm_90a", 132)
    for config in (_gemv(1, 128, 64, vec=4, split_k=8, mode="serial"), _gemv(16, 128, 32, vec=4, split_k=8, mode="serial")):
        res = OpBackend("gemm", "cuda").compile(GemmProblem(int(config["block_m"]), 4096, 4096, "fp32"),
                                                {**config, "prefetch": 1}, target).resources
        # (sm_90, NVRTC 13.0: 122 registers for one row, 173 for 16, against 64 and 128 without prefetch)
        assert res["spill_store_bytes"] == res["spill_load_bytes"] == res["stack_bytes"] == 0, res["registers"]
