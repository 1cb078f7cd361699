"""Compile-only checks of the wgmma family (CI, no GPU): sm_90a cubins build, the ptxas report is parsed, and ptxas
keeps the wgmma pipeline (no C7510 warning) and honours setmaxnreg (no C7508)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracea_cli.backends import cuda_hopper as ch
from tracea_cli.backends import nvrtc
from tracea_cli.backends.archs import limits_for
from tracea_cli.backends.base import CompileFailed, Target
from tracea_cli.ops.gemm import hopper_space as hs
from tracea_cli.ops.gemm.problem import GemmProblem

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")

H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
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
}


@pytest.fixture(scope="module")
def artifacts():
    return {name: ch.compile_config(p, {**BASE, **change}, H200) for name, (p, change) in CASES.items()}


@pytest.mark.parametrize("name", CASES)
def test_cubin_is_built_for_sm90a(artifacts, name):
    art = artifacts[name]
    assert art.binary[:4] == b"\x7fELF"
    assert nvrtc.cubin_arch(art.binary) == "sm_90"
    assert art.resources["ptx_target"] == "sm_90a"
    assert art.resources["ptx_wgmma"] > 0
    assert art.kernel_name == "gemm_wgmma"


@pytest.mark.parametrize("name", CASES)
def test_ptxas_report_is_parsed_and_clean(artifacts, name):
    res = artifacts[name].resources
    assert 0 < res["registers"] <= 255
    assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0 and res["stack_bytes"] == 0
    assert not res["wgmma_serialized"], res["log"]
    assert "C7510" not in res["log"]
    assert not res["setmaxnreg_ignored"], res["log"]


@pytest.mark.parametrize("name", CASES)
def test_launch_description_matches_the_configuration(artifacts, name):
    problem, change = CASES[name]
    config = {**BASE, **change}
    launch = artifacts[name].launch
    json.dumps(launch)  # the export writes it as JSON
    step = launch["steps"][0]
    assert step["block"] == [128 * (1 + config["consumers"]), 1, 1]
    assert step["cluster"] == [config["cluster_m"], 1, 1]
    assert step["dynamic_smem_bytes"] == hs.smem_bytes(problem.dtype, config)
    assert step["grid"]["x"] == ("persistent_clusters" if config["persistent"] else "work_clusters")
    maps = launch["tensor_maps"]
    assert launch["params"][:3] == ["map_a", "map_b", "map_c"]
    assert maps["map_a"]["box"] == [hs.tile_k(problem.dtype), config["tile_m"]]
    rows = config["tile_m"] if config["schedule"] == "pingpong" else config["tile_m"] // config["consumers"]
    assert maps["map_c"]["box"][1] == rows
    for spec in maps.values():
        assert spec["box"][0] * spec["elem_bytes"] == 128  # every box is one 128-byte swizzle row wide
        assert max(spec["box"]) <= 256
    if problem.layout == "nt":
        assert maps["map_b"]["dims"] == ["K", "N"] and maps["map_b"]["box"][1] == config["tile_n"] // config["cluster_m"]
    else:
        assert maps["map_b"]["dims"] == ["N", "K"] and maps["map_b"]["box"][1] == 64 // config["cluster_m"]


def test_source_is_self_contained_and_names_the_configuration():
    problem, _ = CASES["bf16-nn-cluster-silu"]
    source = ch.kernel_source_for(problem, BASE)
    assert '#include "gemm_wgmma' not in source
    assert "#define WG_TILE_N 256" in source and "#define WG_EPILOGUE 3" in source and "#define WG_B_KMAJOR 0" in source
    assert "#define WG_PINGPONG 0" in source
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in source
    assert ch.source_hash(problem) == ch.source_hash(problem) and len(ch.source_hash(problem)) == 16


@pytest.mark.parametrize("config,words", [
    ({**BASE, "tile_m": 64}, "rejected before compiling"),
    ({**BASE, "stages": 9}, "rejected before compiling"),
])
def test_rejected_configurations_never_reach_nvrtc(config, words):
    problem, _ = CASES["bf16-nn-cluster-silu"]
    with pytest.raises(CompileFailed, match=words):
        ch.compile_config(problem, config, H200)


def test_problems_outside_the_family_fail_to_compile_with_the_reason():
    with pytest.raises(CompileFailed, match="K-major"):
        ch.compile_config(GemmProblem(256, 256, 256, "tf32", "nn"), BASE, H200)


def test_backend_space_refuses_with_a_usage_error():
    from tracea_cli.errors import UsageError

    with pytest.raises(UsageError):
        ch.HopperBackend().space(GemmProblem(256, 256, 256, "fp32"), H200)


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
    for problem, config in module.CASES:
        assert hs.hopper_space(problem, H200).why_invalid(config) is None, (problem.label, config)
