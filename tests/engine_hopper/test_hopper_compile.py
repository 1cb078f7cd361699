"""Compile-only checks of the wgmma family (CI, no GPU): sm_90a cubins build, the ptxas report is parsed, and ptxas
keeps the wgmma pipeline (no C7510 warning) and honours setmaxnreg (no C7508)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tracea_cli.backends import cuda, nvrtc
from tracea_cli.backends.base import CompileFailed
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.families.wgmma import WGMMA, wgmma_launch, wgmma_source
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import KernelStep
from tracea_cli.target import Target, limits_for

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
BACKEND = OpBackend("gemm", "cuda")
BASE = {"family": "wgmma", "tile_m": 128, "tile_n": 256, "stages": 4, "consumers": 2, "schedule": "cooperative",
        "cluster_m": 2, "persistent": 1, "group_m": 8, "store": "direct"}

# Each case exercises a different branch of the template: dtype, layout (B K- or N-major), tile shape, consumers,
# cluster multicast, persistence, epilogue kind and store path.
CASES = {
    "bf16-nn-cluster-silu": (GemmProblem(4096, 4096, 4096, "bf16", "nn", "bias_silu"), {}),
    "fp16-nt-tma-store": (GemmProblem(4096, 7168, 2048, "fp16", "nt"), {"stages": 3, "store": "tma", "cluster_m": 1}),
    "fp16-nn-one-consumer": (GemmProblem(1000, 3000, 776, "fp16", "nn", "bias_relu"),
                             {"tile_m": 128, "tile_n": 128, "consumers": 1, "persistent": 0, "cluster_m": 1,
                              "group_m": 4}),
    "tf32-nt-residual": (GemmProblem(2048, 2048, 2048, "tf32", "nt", "bias_residual"),
                         {"tile_n": 128, "stages": 3, "store": "tma", "group_m": 4}),
    "bf16-nt-256x128-gelu": (GemmProblem(4096, 2112, 7168, "bf16", "nt", "bias_gelu"),
                             {"tile_m": 256, "tile_n": 128}),
    "fp16-nn-192-small": (GemmProblem(512, 384, 256, "fp16", "nn"),
                          {"tile_n": 192, "stages": 3, "cluster_m": 1, "group_m": 4}),
    "bf16-nn-pingpong-tma-silu": (GemmProblem(4096, 4096, 4096, "bf16", "nn", "bias_silu"),
                                  {"tile_n": 128, "schedule": "pingpong", "store": "tma", "cluster_m": 1}),
    "fp16-nt-pingpong-cluster-gelu": (GemmProblem(4096, 4096, 4096, "fp16", "nt", "bias_gelu"),
                                      {"tile_m": 64, "tile_n": 256, "schedule": "pingpong"}),
    # behind the staging pre-pass: B transposed (tf32 nn), A padded (K = 777), A and B padded (nt)
    "tf32-nn-staged-transpose": (GemmProblem(4096, 4096, 4096, "tf32", "nn"),
                                 {"tile_n": 128, "stages": 4, "cluster_m": 1, "store": "tma"}),
    "fp16-nn-staged-k777": (GemmProblem(1000, 3000, 777, "fp16", "nn"),
                            {"stages": 3, "cluster_m": 1, "store": "tma", "group_m": 4}),
    "bf16-nt-staged-k777-silu": (GemmProblem(1000, 3000, 777, "bf16", "nt", "bias_silu"), {"group_m": 4}),
    # ragged N (C's rows not 16-byte strided: no map over C, element-wise epilogue), with B staged in nn
    "fp16-nn-ragged-4k": (GemmProblem(4095, 4097, 4091, "fp16", "nn"), {"cluster_m": 1}),
    "bf16-nt-ragged-residual": (GemmProblem(3001, 5003, 2999, "bf16", "nt", "bias_residual"),
                                {"tile_n": 128, "schedule": "pingpong", "group_m": 4}),
    "tf32-nt-ragged-n-relu": (GemmProblem(1000, 3001, 776, "tf32", "nt", "bias_relu"),
                              {"tile_n": 128, "stages": 3, "group_m": 4}),
    "fp16-nn-n4100-gelu": (GemmProblem(2048, 4100, 2048, "fp16", "nn", "bias_gelu"), {"cluster_m": 1}),
}
STAGED = {"tf32-nn-staged-transpose": ["gemm_stage_b"], "fp16-nn-staged-k777": ["gemm_stage_a"],
          "bf16-nt-staged-k777-silu": ["gemm_stage_a", "gemm_stage_b"],
          "fp16-nn-ragged-4k": ["gemm_stage_a", "gemm_stage_b"], "bf16-nt-ragged-residual": ["gemm_stage_a", "gemm_stage_b"],
          "fp16-nn-n4100-gelu": ["gemm_stage_b"]}
RAGGED_N = {"fp16-nn-ragged-4k", "bf16-nt-ragged-residual", "tf32-nt-ragged-n-relu", "fp16-nn-n4100-gelu"}


@pytest.fixture(scope="module")
def artifacts():
    return {name: BACKEND.compile(p, {**BASE, **change}, H200) for name, (p, change) in CASES.items()}


@pytest.mark.parametrize("name", CASES)
def test_cubin_is_built_for_sm90a(artifacts, name):
    art = artifacts[name]
    assert art.binary[:4] == b"\x7fELF"
    assert nvrtc.cubin_arch(art.binary) == "sm_90"
    assert art.arch == art.plan.arch == art.resources["arch"] == "sm_90a"
    assert art.resources["ptx_target"] == "sm_90a"
    program = cuda.compile_program(art.source, art.arch)  # the compile kept for this process, not a second one
    assert program.cubin == art.binary and program.ptx.count("wgmma.mma_async") > 0
    assert art.family == "wgmma" and art.plan.kernels[-1].name == "gemm_wgmma"


@pytest.mark.parametrize("name", CASES)
def test_ptxas_report_is_parsed_and_clean(artifacts, name):
    res = artifacts[name].resources
    assert 0 < res["registers"] <= 255
    assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0 and res["stack_bytes"] == 0
    assert set(res["kernels"]) == {"gemm_wgmma", *STAGED.get(name, [])}
    for kernel in res["kernels"].values():
        assert 0 < kernel["registers"] <= 255 and kernel["spill_store_bytes"] == kernel["stack_bytes"] == 0
    assert cuda.SERIALIZED_WGMMA == "C7510" and cuda.IGNORED_SETMAXNREG == "C7508"
    assert "C7510" not in res["log"], res["log"]  # the wgmma pipeline was not serialised
    assert "C7508" not in res["log"], res["log"]  # setmaxnreg was honoured


@pytest.mark.parametrize("name", CASES)
def test_launch_description_matches_the_configuration(artifacts, name):
    problem, change = CASES[name]
    config = {**BASE, **change}
    plan = artifacts[name].plan
    assert plan == wgmma_launch(problem, config)
    document = json.loads(json.dumps(plan.as_dict()))  # the export writes it as JSON
    assert document["steps"][-1]["name"] == "gemm_wgmma" and document["tensor_maps"].keys() == plan.tensor_maps.keys()
    step = plan.steps[-1]  # the GEMM comes last, after any staging
    assert isinstance(step, KernelStep)
    assert step.name == "gemm_wgmma" and step.block == (128 * (1 + config["consumers"]), 1, 1)
    assert step.cluster == (config["cluster_m"], 1, 1)
    assert step.dynamic_smem_bytes == hs.smem_bytes(problem.dtype, config)
    assert step.grid[0] == ("persistent_clusters" if config["persistent"] else "work_clusters")
    assert (plan.tile_m, plan.tile_n, plan.cluster_m, plan.persistent) == (
        config["tile_m"], config["tile_n"], config["cluster_m"], config["persistent"])
    maps = plan.tensor_maps
    assert maps["map_a"].box == (hs.tile_k(problem.dtype), config["tile_m"])
    if name in RAGGED_N:  # the kernel takes no map over C, and its source says so
        assert plan.params[:3] == ("map_a", "map_b", "C") and "map_c" not in maps
        assert "ragged_store(C + at, col, N, v0, v1)" in artifacts[name].source
        assert "TensorMap map_c" not in artifacts[name].source  # the entry takes no map over C
    else:
        assert plan.params[:3] == ("map_a", "map_b", "map_c") and "ragged_store" not in artifacts[name].source
        rows = config["tile_m"] if config["schedule"] == "pingpong" else config["tile_m"] // config["consumers"]
        assert maps["map_c"].box[1] == rows
    for spec in maps.values():
        assert spec.box[0] * spec.elem_bytes == 128  # every box is one 128-byte swizzle row wide
        assert max(spec.box) <= 256
    if problem.layout == "nt" or name == "tf32-nn-staged-transpose":  # a transposed B is read K-major
        assert maps["map_b"].dims == ("K", "N") and maps["map_b"].box[1] == config["tile_n"] // config["cluster_m"]
    else:
        assert maps["map_b"].dims == ("N", "K") and maps["map_b"].box[1] == 64 // config["cluster_m"]


@pytest.mark.parametrize("name", STAGED)
def test_staged_problems_carry_their_stage_entries_steps_and_scratch(artifacts, name):
    from tracea_cli.export.elf import function_symbols

    problem, _ = CASES[name]
    art = artifacts[name]
    stages = STAGED[name]
    assert set(stages) | {"gemm_wgmma"} <= function_symbols(art.binary)
    assert set(art.resources["kernels"]) == {*stages, "gemm_wgmma"}
    steps = art.plan.steps
    assert [s.name for s in steps] == [*stages, "gemm_wgmma"]  # the staging runs first, in the timed sequence
    e = hs.elem_bytes(problem.dtype)
    transposed = problem.dtype == "tf32" and problem.layout == "nn"
    b_rows, b_cols = ("K", "N") if problem.layout == "nn" and not transposed else ("N", "K")  # B as staged
    for step in steps[:-1]:
        assert step.block == (256, 1, 1) and step.dynamic_smem_bytes == 0 and step.cluster is None
        operand = step.name[-1].upper()
        rows, cols = ("M", "K") if operand == "A" else (b_rows, b_cols)
        assert step.params == (operand, f"{operand}_staged", rows, cols, f"ld{operand.lower()}",
                               f"ld{operand.lower()}_staged")
        assert art.plan.step_params(step) == step.params
        expected_grid = ("n/64", "k/64", 1) if transposed else (f"{rows.lower()}/8", f"{cols.lower()}/{512 // e}", 1)
        assert step.grid == expected_grid
    assert steps[-1].params is None and art.plan.step_params(steps[-1]) == art.plan.params
    scratch = art.plan.scratch
    assert [b.name for b in scratch] == [f"{s[-1].upper()}_staged" for s in stages]
    assert all(b.ld_multiple * e == 128 and b.align_bytes == 256 for b in scratch)
    assert [(b.rows, b.cols) for b in scratch] == [("M", "K") if b.source == "A" else (b_rows, b_cols) for b in scratch]
    assert [b.transposed for b in scratch] == [transposed and b.source == "B" for b in scratch]
    maps = art.plan.tensor_maps
    assert (maps["map_a"].tensor, maps["map_a"].row_stride) == (
        ("A_staged", "lda_staged") if "gemm_stage_a" in stages else ("A", "lda"))
    if "gemm_stage_b" in stages:  # read K-major where B is N x K, N-major where it stays K x N
        assert (maps["map_b"].tensor, maps["map_b"].row_stride, maps["map_b"].dims) == (
            "B_staged", "ldb_staged", (b_cols, b_rows) if b_rows == "K" else ("K", "N"))
    assert "#define WG_B_KMAJOR 1" in art.source if transposed else True
    # the staging entries are part of the source, and of the cache key: it differs from an unstaged problem's
    unstaged = GemmProblem(512, 512, 512, problem.dtype, "nt")
    assert "gemm_stage_" in art.source and "gemm_stage_" in WGMMA.template(problem)
    assert BACKEND.source_hash(problem) != BACKEND.source_hash(unstaged)


def test_scratch_layout_follows_the_description():
    problem, config = CASES["bf16-nt-staged-k777-silu"]
    plan = wgmma_launch(problem, {**BASE, **config})
    sizes = {"M": problem.m, "N": problem.n, "K": problem.k}  # 1000 x 3000 x 777
    (a, b), total = plan.scratch_layout(sizes)
    assert (a.name, a.ld_name, a.offset, a.ld, a.nbytes) == ("A_staged", "lda_staged", 0, 832, 1000 * 832 * 2)
    assert (b.name, b.ld_name, b.offset, b.ld) == ("B_staged", "ldb_staged", 1000 * 832 * 2, 832)
    assert b.offset % 256 == 0 and total == b.offset + 3000 * 832 * 2 == plan.workspace_bytes(sizes)
    (a,), total = dataclasses.replace(plan, scratch=plan.scratch[:1]).scratch_layout({"M": 999, "N": 3000, "K": 1})
    assert a.ld == 64 and total == 999 * 64 * 2
    assert wgmma_launch(GemmProblem(512, 512, 512, "bf16", "nt"), BASE).scratch_layout(
        {"M": 512, "N": 512, "K": 512}) == ((), 0)
    assert [plan.grid_extent(rule, sizes) for rule in ("m/8", "n/8", "k/256", "k/64", 1)] == [125, 375, 4, 13, 1]


def test_unstaged_sources_have_no_stage_entries():
    problem, _ = CASES["fp16-nt-tma-store"]
    assert "gemm_stage_" not in wgmma_source(problem, BASE) and "gemm_stage_" not in WGMMA.template(problem)
    # unstaged problems keep their cache keys: one per dtype, whatever the shape and layout
    assert BACKEND.source_hash(problem) == BACKEND.source_hash(GemmProblem(512, 384, 256, "fp16", "nn"))
    plan = wgmma_launch(problem, BASE)
    assert plan.scratch == () and "scratch" not in plan.as_dict()
    assert [s.name for s in plan.steps] == ["gemm_wgmma"]


def test_source_is_self_contained_and_names_the_configuration():
    problem, _ = CASES["bf16-nn-cluster-silu"]
    source = wgmma_source(problem, BASE)
    assert WGMMA.source(problem, BASE) == source
    assert '#include "gemm_wgmma' not in source
    assert "#define WG_TILE_N 256" in source and "#define WG_EPILOGUE 3" in source and "#define WG_B_KMAJOR 0" in source
    assert "#define WG_PINGPONG 0" in source
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in source
    assert BACKEND.source_hash(problem) == BACKEND.source_hash(problem) and len(BACKEND.source_hash(problem)) == 16


@pytest.mark.parametrize("config,words", [
    ({**BASE, "tile_m": 64}, "rejected before compiling"),
    ({**BASE, "stages": 9}, "rejected before compiling"),
])
def test_rejected_configurations_never_reach_nvrtc(config, words, monkeypatch):
    problem, _ = CASES["bf16-nn-cluster-silu"]
    monkeypatch.setattr(cuda, "compile_program", lambda *a, **kw: pytest.fail("NVRTC was asked"))
    with pytest.raises(CompileFailed, match=words):
        BACKEND.compile(problem, config, H200)


def test_problems_outside_the_family_fail_to_compile_with_the_reason():
    with pytest.raises(CompileFailed, match="no fp64 kernels"):
        BACKEND.compile(GemmProblem(256, 256, 256, "fp64", "nn"), BASE, H200)


def test_a_ragged_n_configuration_with_a_tma_store_is_refused_before_compiling(monkeypatch):
    monkeypatch.setattr(cuda, "compile_program", lambda *a, **kw: pytest.fail("NVRTC was asked"))
    with pytest.raises(CompileFailed, match="store=tma needs C's rows to be a multiple of 16 bytes"):
        BACKEND.compile(GemmProblem(4096, 4097, 4096, "fp16", "nt"),
                        {**BASE, "tile_n": 128, "stages": 3, "cluster_m": 1, "store": "tma"}, H200)


def test_the_family_refuses_a_problem_outside_it_with_the_reason():
    """The wgmma family has no fp32 kernels: its space is the reason, the CUDA space leaves it out, and a wgmma
    configuration for such a problem is invalid with that reason."""
    problem = GemmProblem(256, 256, 256, "fp32")
    reason = WGMMA.space(problem, H200)
    assert isinstance(reason, str) and "no fp32 kernels" in reason
    assert "tile_m" not in BACKEND.space(problem, H200).names
    assert [f.name for f, _ in BACKEND.spaces(problem, H200)] == ["mma", "simt"]  # mma: 3xTF32
    assert BACKEND.why_invalid(problem, H200, BASE) == reason
    assert all(c["family"] != "wgmma" for c in BACKEND.suggested(problem, H200))


def test_mma_header_is_generated():
    from importlib.util import module_from_spec, spec_from_file_location

    here = Path(__file__).parent
    spec = spec_from_file_location("mma_header", here / "mma_header.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (here.parents[1] / "kernels" / "cuda" / "gemm_wgmma_mma.cuh").read_text()
    assert module.generate() == committed


def test_the_gpu_tests_use_configurations_of_the_space():
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("hopper_gpu_cases", Path(__file__).parent / "test_hopper_gpu.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    for problem, config in module.CASES + module.STAGED_CASES:
        assert hs.hopper_space(problem, H200).why_invalid(config) is None, (problem.label, config)
        assert BACKEND.why_invalid(problem, H200, config) is None, (problem.label, config)


def test_ragged_n_edits_each_replace_one_line_and_leave_other_problems_alone():
    """The ragged-N kernel is gemm_wgmma.cuh's text with the edits applied (each line it replaces found exactly once);
    aligned problems compile the header as it is, so their sources and cache keys do not move."""
    from tracea_cli.ops.gemm.families import wgmma as wg
    from tracea_cli.resources import kernel_source

    kernel = kernel_source(wg.HEADER)
    assert all(kernel.count(old) == 1 for old, _ in wg.RAGGED_N_EDITS)
    ragged, aligned = GemmProblem(4095, 4097, 4091, "fp16", "nn"), GemmProblem(4095, 4096, 4091, "fp16", "nn")
    assert kernel.replace('#include "gemm_wgmma_mma.cuh"', "") in wg.headers_text(aligned).replace(
        kernel_source(wg.MMA_HEADER), "")
    assert "ragged_bias_pair" not in wg.headers_text(aligned) and "ragged_bias_pair" in wg.headers_text(ragged)
    assert BACKEND.source_hash(ragged) != BACKEND.source_hash(aligned)
    with pytest.raises(RuntimeError, match="ragged-N edits cannot be placed"):
        wg.ragged_n_text(kernel.replace("    consume(ring, &map_c, C, bias,", "    consume(ring, &map_c, C,  bias,"))
