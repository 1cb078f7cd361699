"""The compile-only path: configurations compile to cubin for sm_80 and sm_90 without a GPU, within the limits."""

from __future__ import annotations

import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from slow_tests import SLOW_TESTS

from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import CompileFailed
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.gemm.families.engine import gemm_launch, gemm_source
from tracea_cli.ops.gemm.families.engine_space import gemm_space, hand_picked, tiling
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES, GemmProblem
from tracea_cli.ops.launch import KernelStep, MemsetStep

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[test]')")

SAMPLE_PER_DTYPE = 12 if SLOW_TESTS else 6  # per dtype, half for sm_80 and half for sm_90
SEED = 20261129
PTXAS = shutil.which("ptxas") or next(iter(Path("/usr/local").glob("cuda*/bin/ptxas")), None)
BACKEND = OpBackend("gemm", "cuda")


def seeded_sample(dtype: str, count: int, targets) -> list[tuple[GemmProblem, dict, object]]:
    """`count` valid configurations drawn uniformly from the raw space (rejection sampling), over varied problems."""
    rng = random.Random(f"{SEED}-{dtype}")
    out = []
    while len(out) < count:
        target = targets[len(out) % len(targets)]
        problem = GemmProblem(rng.choice((256, 1000, 4096)), rng.choice((64, 1023, 4096)), rng.choice((96, 1000, 4096)),
                              dtype=dtype, layout=rng.choice(("nn", "nt")), epilogue=rng.choice(EPILOGUE_NAMES))
        space = gemm_space(problem, target)
        for _ in range(200):
            config = {p.name: rng.choice(p.values) for p in space.params}
            if space.why_invalid(config) is None:
                out.append((problem, config, target))
                break
    return out


def _compile(job):
    problem, config, target = job
    try:
        return job, BACKEND.compile(problem, config, target), None
    except CompileFailed as e:
        return job, None, str(e)


@pytest.mark.parametrize("dtype", ("fp32", "fp64", "tf32", "fp16", "bf16"))
def test_a_seeded_sample_compiles_for_sm80_and_sm90_within_the_limits(dtype, sm80, sm90):
    jobs = seeded_sample(dtype, SAMPLE_PER_DTYPE, (sm80, sm90))
    with ThreadPoolExecutor(max_workers=2) as pool:  # NVRTC through ctypes releases the GIL
        results = list(pool.map(_compile, jobs))
    for (problem, config, target), artifact, error in results:
        assert error is None, f"{problem.label} {config} for {target.arch}: {error}"
        limits = target.limits
        res = artifact.resources
        t = tiling(problem, config)
        plan = artifact.plan
        assert nvrtc.cubin_arch(artifact.binary) == target.arch == artifact.arch == res["arch"]
        assert artifact.family == config["family"] and artifact.config == config
        assert 0 < res["registers"] <= 255
        assert res["registers"] * t.threads <= limits.registers_per_block
        assert res["static_shared_bytes"] + res["dynamic_shared_bytes"] <= limits.max_shared_per_block_optin
        main = plan.main_kernel
        assert isinstance(main, KernelStep) and main.name == "gemm_main" and main.block == (t.threads, 1, 1)
        assert res["dynamic_shared_bytes"] == t.smem_bytes == main.dynamic_smem_bytes
        assert plan.alignment_bytes == t.copy_bytes
        assert ("gemm_splitk_reduce" in res["kernels"]) == (config["split_k"] > 1)
        assert any(isinstance(s, MemsetStep) for s in plan.steps) == (config["split_k"] > 1)
        staged = [s.name for s in plan.steps if isinstance(s, KernelStep) and s.name.startswith("gemm_stage_")]
        assert len(staged) == len(plan.scratch) and set(staged) <= set(res["kernels"])
        assert artifact.source == gemm_source(problem, config)
        assert plan == gemm_launch(problem, config)


def test_the_simt_fp32_tiles_compile_without_spills_and_keep_16_warps_resident(sm80, sm90):
    """The 128 x 128 x 8 tiles promise ptxas two blocks of 8 warps per SM (MIN_BLOCKS): it must fit them in 128
    registers without spilling; the 8 x 16-per-lane tiles make no promise and must not spill either."""
    jobs = []
    for layout in ("nn", "nt"):
        problem = GemmProblem(4096, 4096, 4096, dtype="fp32", layout=layout)
        for target in (sm80, sm90):
            for wm, wn, bm in ((64, 32, 128), (32, 64, 128), (64, 64, 128), (64, 64, 256)):
                config = {"family": "simt", "block_m": bm, "block_n": 128, "block_k": 8, "warp_m": wm, "warp_n": wn,
                          "stages": 2, "split_k": 1, "group_m": 8, "vec": 4}
                jobs.append((problem, config, target))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_compile, jobs))
    for (problem, config, target), artifact, error in results:
        assert error is None, error
        res = artifact.resources
        label = f"{problem.layout} {config['warp_m']}x{config['warp_n']} {target.arch}"
        assert res["spill_store_bytes"] == res["spill_load_bytes"] == res["stack_bytes"] == 0, label
        assert "Gemm::THREADS, Gemm::MIN_BLOCKS" in artifact.source
        if config["warp_m"] * config["warp_n"] == 2048:  # 8 x 8 per lane: two blocks of 256 threads per SM
            assert res["registers"] <= 128, label


def test_the_staged_picks_of_ragged_shapes_compile_like_their_in_place_kernels(sm80, sm90):
    """stage = 1 adds the copy kernels to the module and leaves the main kernel as it is: the same registers as the
    same tile reading aligned rows in place, no spills; the copies run first and the main kernel reads them."""
    jobs = []
    for dtype, layout, shape in (("fp32", "nn", (4095, 4097, 4091)), ("fp32", "nt", (3001, 5003, 2999)),
                                 ("fp16", "nn", (4095, 4097, 4091)), ("tf32", "nt", (3001, 5003, 2999))):
        problem = GemmProblem(*shape, dtype=dtype, layout=layout)
        target = sm80 if dtype == "tf32" else sm90
        config = hand_picked(problem, target)[0]
        assert config["stage"] == 1 and config["vec"] > 1, config
        aligned = GemmProblem(*(d + (-d) % 32 for d in shape), dtype=dtype, layout=layout)
        jobs += [(problem, config, target), (aligned, {k: v for k, v in config.items() if k != "stage"}, target)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_compile, jobs))
    for ((problem, config, _), staged, error), ((_, _, _), in_place, error2) in zip(results[::2], results[1::2]):
        assert error is None and error2 is None, (error, error2)
        res = staged.resources
        assert {"gemm_stage_a", "gemm_stage_b", "gemm_main"} <= set(res["kernels"]), res["kernels"]
        assert res["registers"] == in_place.resources["registers"], problem.label
        assert res["spill_store_bytes"] == res["spill_load_bytes"] == 0, problem.label
        plan = staged.plan
        assert [s.name for s in plan.steps][:2] == ["gemm_stage_a", "gemm_stage_b"]
        assert plan.step_params(plan.main_kernel)[:2] == ("A_staged", "B_staged")


def test_the_small_m_sliced_k_picks_compile_without_spills(sm80, sm90):
    """The sliced-K pick of each small-M problem, for sm_80 and sm_90: one kernel, the block and shared memory the
    template asserts, no spill. Plus a tile whose K-slices' sums need more shared memory than its pipeline."""
    from tracea_cli.ops.gemm.families.engine_space import hand_picked

    jobs = []
    for m in (1, 16, 64):
        for dtype, layout in (("fp16", "nn"), ("bf16", "nt"), ("tf32", "nn")):
            problem = GemmProblem(m, 4096, 4096, dtype=dtype, layout=layout, epilogue="bias_gelu" if m == 1 else "none")
            for target in (sm80, sm90):
                jobs.append((problem, hand_picked(problem, target, limit=1)[0], target))
    reduction_bound = {"family": "mma", "block_m": 32, "block_n": 64, "block_k": 128, "warp_m": 32, "warp_n": 32,
                       "stages": 2, "split_k": 2, "group_m": 1, "vec": 8, "slice_k": 8}
    jobs.append((GemmProblem(64, 1024, 4096, dtype="fp16"), reduction_bound, sm90))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_compile, jobs))
    for (problem, config, target), artifact, error in results:
        label = f"{problem.label} {config} {target.arch}"
        assert error is None and config["slice_k"] > 1, label
        res = artifact.resources
        assert res["spill_store_bytes"] == res["spill_load_bytes"] == res["stack_bytes"] == 0, label
        assert res["registers"] * tiling(problem, config).threads <= target.limits.registers_per_block, label
    t = tiling(GemmProblem(64, 1024, 4096, dtype="fp16"), reduction_bound)
    assert t.threads == 512 and t.smem_bytes == 7 * 32 * 64 * 4  # the sums, more than the 2 x 26.5 KiB pipeline


def test_compiling_needs_a_valid_configuration(monkeypatch, sm90):
    """A configuration outside the space is refused with the space's reason, before NVRTC sees any source."""
    from tracea_cli.backends import cuda

    problem = GemmProblem(1000, 1000, 1001, dtype="fp16")
    config = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 3,
              "split_k": 1, "group_m": 1, "vec": 8}
    monkeypatch.setattr(cuda, "compile_program", lambda *a, **kw: pytest.fail("compiled a rejected configuration"))
    with pytest.raises(CompileFailed, match="rejected before compiling.*multiple of 8"):
        BACKEND.compile(problem, config, sm90)
    with pytest.raises(CompileFailed, match="family='nope' is not one of"):
        BACKEND.compile(problem, {**config, "family": "nope"}, sm90)


def test_a_broken_source_is_a_compile_failure_with_the_log(monkeypatch, sm90):
    import tracea_cli.ops.gemm.families.engine as engine

    problem = GemmProblem(64, 64, 64, dtype="fp32")
    config = gemm_space(problem, sm90).valid_configs()[0]
    monkeypatch.setattr(engine, "gemm_source", lambda p, c: "this is not CUDA;\n")
    with pytest.raises(CompileFailed, match="error"):
        BACKEND.compile(problem, config, sm90)


def test_the_generated_source_guards_its_launch_description(sm90):
    """The kernel asserts, at compile time, the block size and shared memory the launch description promises."""
    problem = GemmProblem(512, 512, 512, dtype="bf16", layout="nt", epilogue="bias_gelu")
    config = gemm_space(problem, sm90).valid_configs()[-1]
    source = gemm_source(problem, config)
    t = tiling(problem, config)
    assert f"Gemm::SMEM_BYTES == {t.smem_bytes}" in source and f"Gemm::THREADS == {t.threads}" in source
    assert '#include "' not in source  # self-contained: what export ships compiles anywhere
    lied = source.replace(f"Gemm::SMEM_BYTES == {t.smem_bytes}", f"Gemm::SMEM_BYTES == {t.smem_bytes + 16}")
    with pytest.raises(nvrtc.NvrtcError) as err:
        nvrtc.compile_source(lied, nvrtc.CompileOptions(arch="sm_90"))
    assert "shared memory differs" in err.value.log


@pytest.mark.skipif(PTXAS is None, reason="no standalone ptxas to cross-check the resource report")
def test_resources_agree_with_a_standalone_ptxas(tmp_path, sm80):
    """The registers and spills kept with a cubin are those the standalone ptxas reports for the same PTX."""
    problem = GemmProblem(4096, 4096, 4096, dtype="tf32", layout="nt")
    config = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 3,
              "split_k": 2, "group_m": 8, "vec": 4}
    artifact = BACKEND.compile(problem, config, sm80)
    program = nvrtc.compile_source(artifact.source, nvrtc.CompileOptions(arch="sm_80"))
    ptx = tmp_path / "gemm.ptx"
    ptx.write_text(program.ptx)
    run = subprocess.run([str(PTXAS), "-arch=sm_80", "-v", str(ptx), "-o", str(tmp_path / "gemm.cubin")],
                         capture_output=True, text=True, check=True)
    report = nvrtc.parse_ptxas_report(run.stdout + run.stderr)
    assert set(report) == {"gemm_main", "gemm_splitk_reduce"}
    for name, standalone in report.items():
        kept = artifact.resources["kernels"][name]
        assert kept["registers"] == standalone.registers > 0
        assert kept["spill_store_bytes"] == standalone.spill_store_bytes
        assert kept["stack_bytes"] == standalone.stack_bytes


@pytest.mark.skipif(not SLOW_TESTS, reason="whole space: TRACEA_SLOW_TESTS=1")
@pytest.mark.parametrize("dtype", ("fp32", "fp64", "tf32", "fp16", "bf16"))
def test_the_whole_space_compiles(dtype, sm90):
    """Opt-in: every valid configuration of a large aligned problem compiles for sm_90 within the limits (hours)."""
    problem = GemmProblem(4096, 4096, 4096, dtype=dtype)
    jobs = [(problem, c, sm90) for c in gemm_space(problem, sm90).valid_configs()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for (p, config, target), artifact, error in pool.map(_compile, jobs):
            assert error is None, f"{config}: {error}"
            assert artifact.resources["registers"] * tiling(p, config).threads <= target.limits.registers_per_block


def test_a_program_is_compiled_once_even_when_threads_ask_together(monkeypatch, sm90):
    """Threads asking for the same program wait for one compile (NVRTC's own cache would hide the ptxas report)."""
    import threading
    import time

    import tracea_cli.backends.cuda as cuda

    problem = GemmProblem(96, 80, 72, dtype="fp64", layout="nt", epilogue="bias")
    config = gemm_space(problem, sm90).valid_configs()[3]
    calls = []
    real = nvrtc.compile_source

    def slow(source, options, **kw):
        calls.append(threading.get_ident())
        time.sleep(0.2)  # long enough for every thread to ask while the first compile runs
        return real(source, options, **kw)

    monkeypatch.setattr(cuda.nvrtc, "compile_source", slow)
    monkeypatch.setattr(cuda, "_compiled", {})  # nothing compiled earlier in this process counts
    with ThreadPoolExecutor(max_workers=4) as pool:
        artifacts = list(pool.map(lambda _: BACKEND.compile(problem, config, sm90), range(8)))
    assert len(calls) == 1
    assert len({a.binary for a in artifacts}) == 1 and artifacts[0].resources["registers"] > 0


def test_a_compile_that_lost_its_ptxas_report_is_repeated_once(monkeypatch, sm80):
    import dataclasses

    import tracea_cli.backends.cuda as cuda

    problem = GemmProblem(40, 40, 40, dtype="fp32", epilogue="bias_silu")
    config = gemm_space(problem, sm80).valid_configs()[5]
    real = nvrtc.compile_source
    calls = []

    def forgetful(source, options, **kw):  # the first compile comes back without resources, as on a cache hit
        calls.append(1)
        program = real(source, options, **kw)
        return dataclasses.replace(program, resources={}) if len(calls) == 1 else program

    monkeypatch.setattr(cuda.nvrtc, "compile_source", forgetful)
    monkeypatch.setattr(cuda, "_compiled", {})
    artifact = BACKEND.compile(problem, config, sm80)
    assert len(calls) == 2 and artifact.resources["registers"] > 0


def test_the_example_in_docs_engine_runs():
    text = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(example, "docs/engine.md", "exec"), {})


def test_a_k_cluster_kernel_declares_its_cluster_and_adds_through_dsmem(sm90):
    """cluster_k = 2: the entry carries its cluster shape (so a plain launch makes the clusters), the blocks meet at
    cluster barriers and store into block 0's shared memory; grid z is the cluster; no workspace, one launch."""
    problem = GemmProblem(16, 4096, 4096, dtype="fp16")
    config = gemm_space(problem, sm90).complete(
        {"family": "mma", "block_m": 16, "block_n": 64, "block_k": 256, "warp_m": 16, "warp_n": 32, "stages": 5,
         "split_k": 1, "group_m": 1, "vec": 8, "slice_k": 4, "cluster_k": 2})
    assert gemm_space(problem, sm90).why_invalid(config) is None
    source = gemm_source(problem, config)
    assert "__cluster_dims__(1, 1, 2)" in source
    ptx = nvrtc.compile_source(source, nvrtc.CompileOptions(arch="sm_90")).ptx
    assert ".reqnctapercluster 1, 1, 2" in ptx or ".explicitcluster" in ptx
    assert "barrier.cluster.arrive" in ptx and "mapa.shared::cluster" in ptx and "st.shared::cluster" in ptx
    plan = gemm_launch(problem, config)
    assert [type(s) for s in plan.steps] == [KernelStep] and plan.steps[0].grid[2] == 2
    assert plan.steps[0].cluster is None  # declared by the entry, not given at launch
    assert plan.workspace_bytes_per_mn == 0 and plan.workspace_bytes({"M": 16, "N": 4096, "K": 4096}) == 0


def test_the_fp32_gemv_picks_compile_without_spills(make_target, sm80):
    """The gemv kernel's two hand-picked configurations (fp32, 1 and 16 rows, layout nn) for sm_90a and sm_80: first
    its slices summed in one launch (splitk_mode serial: the main kernel alone, the counters zeroed once), then with
    split-K's summing pass (no memset); the block and shared memory the template asserts, no spill."""
    from tracea_cli.ops.gemm.families.engine import SUM_KERNEL
    from tracea_cli.ops.gemm.families.engine_space import hand_picked

    jobs = []
    for m, epilogue in ((1, "bias_gelu"), (16, "none")):
        for target in (make_target("sm_90a", 132), sm80):
            problem = GemmProblem(m, 4096, 4096, dtype="fp32", epilogue=epilogue)
            jobs += [(problem, c, target) for c in hand_picked(problem, target, limit=2)]
    assert len(jobs) == 8
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_compile, jobs))
    for (problem, config, target), artifact, error in results:
        assert error is None, error
        assert config["kernel"] == "gemv" and config["split_k"] > 1
        res = artifact.resources
        assert res["spill_store_bytes"] == res["spill_load_bytes"] == res["stack_bytes"] == 0, problem.label
        assert res["registers"] <= 128, (problem.label, target.arch, config["splitk_mode"], res["registers"])
        assert res["dynamic_shared_bytes"] == tiling(problem, config).smem_bytes
        memsets = [s for s in artifact.plan.steps if isinstance(s, MemsetStep)]
        if config["splitk_mode"] == "serial":
            assert set(res["kernels"]) == {"gemm_main"}
            assert memsets == [MemsetStep(elem_bytes=4, once=True)]
            assert artifact.plan.workspace_bytes_per_mn == 4 * (config["split_k"] + 1)
        else:
            assert set(res["kernels"]) == {"gemm_main", SUM_KERNEL}
            assert not memsets
            assert artifact.plan.workspace_bytes_per_mn == 4 * config["split_k"]
