"""`tracea export` of the Hopper wgmma/TMA family: sm_90a cubins named as such, no PTX (with the note saying why), a
valid manifest with the tensor maps and clusters, and a C header that encodes the tensor maps at launch and launches
with cuLaunchKernelEx, checked against the fake driver without a GPU. One GPU test (marked) runs the example on an
H200."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from export_helpers import (
    backend_grid,
    build,
    build_probe,
    cache_key,
    cli,
    fields,
    needs_nvrtc,
    read_manifest,
    run_probe,
    run_with_fake,
)

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import Trial, TuningCache
from tracea_cli.errors import TraceaError
from tracea_cli.export import c_header
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import COMPILED_ONLY, VERIFIED, validate
from tracea_cli.export.writer import export_target
from tracea_cli.ops.gemm.export.abi import ABI
from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.families.engine import MMA
from tracea_cli.ops.gemm.problem import EPILOGUES, GemmProblem
from tracea_cli.ops.launch import KernelStep, LaunchPlan, TensorMap

pytestmark = [needs_nvrtc, pytest.mark.timeout(300)]

CASES = [(dtype, layout) for dtype in ("fp16", "bf16") for layout in ("nn", "nt")]
DTYPE_CODE = {"fp16": 2, "bf16": 3}  # tracea::DType
MAP_TYPE = {"fp16": 6, "bf16": 9, "fp32": 7, "tf32": 11}  # CUtensorMapDataType in cuda.h
SWIZZLE_128B, L2_256B, OOB_ZERO, INTERLEAVE_NONE = 3, 3, 0, 0
SMS = 132  # the fake driver's default SM count
CALL = (1024, 1032, 520)  # no multiple of the tiles: M ragged, N and K multiples of 8 only


def default_config(dtype: str, layout: str) -> dict:
    config = hs.default_config(GemmProblem(4096, 4096, 4096, dtype, layout), export_target("sm_90a"))
    assert config is not None and config["family"] == "wgmma"
    return config


def export_config(tmp: Path, config: dict, *, dtype: str, layout: str, arch: str = "sm_90a", epilogue: str = "none",
                  shape: str = "4096x4096x4096"):
    (tmp / "config.json").write_text(json.dumps(config))
    return cli(["gemm", "--shapes", shape, "--dtype", dtype, "--layout", layout, "--epilogue", epilogue, "--arch", arch,
                "--config", str(tmp / "config.json"), "--out", str(tmp / "out"), "--json"], tmp)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The default wgmma configuration at 4096^3 for fp16 and bf16, nn and nt, exported for sm_90a."""
    folders = {}
    for dtype, layout in CASES:
        tmp = tmp_path_factory.mktemp(f"wgmma_{dtype}_{layout}")
        result = export_config(tmp, default_config(dtype, layout), dtype=dtype, layout=layout)
        assert result.exit_code == 0, result.output
        folders[(dtype, layout)] = (tmp / "out", result)
    return folders


@pytest.fixture(scope="module")
def probes(exports, toolchain):
    built = {}

    def get(case):
        if case not in built:
            built[case] = build_probe(exports[case][0], toolchain, elem_bytes=2, dtype_code=DTYPE_CODE[case[0]])
        return built[case]

    return get


def launches(log):
    return [fields(line) for line in log if line.startswith("launch ")]


def tensor_maps(log):
    return [fields(line) for line in log if line.startswith("tensor_map ")]


def expected_maps(dtype: str, layout: str, config: dict, m: int, n: int, k: int) -> list[dict]:
    """docs/kernel-abi.md's table ("Tensor maps") for packed operands: dims innermost first, row stride in bytes."""
    e = 2
    cluster = config["cluster_m"]
    rows_c = config["tile_m"] if config["schedule"] == "pingpong" else config["tile_m"] // config["consumers"]
    b = ((k, n), k * e, (64, config["tile_n"] // cluster)) if layout == "nt" else ((n, k), n * e, (64, 64 // cluster))
    return [{"dims": f"{dims[0]},{dims[1]}", "stride": str(stride), "box": f"{box[0]},{box[1]}"}
            for dims, stride, box in (((k, m), k * e, (64, config["tile_m"])), b, ((n, m), n * e, (64, rows_c)))]


def grid_x(config: dict, m: int, n: int, resident: int) -> int:
    work = math.ceil(math.ceil(m / config["tile_m"]) / config["cluster_m"]) * math.ceil(n / config["tile_n"])
    return (min(work, resident) if config["persistent"] else work) * config["cluster_m"]


# ---- what is written ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_a_wgmma_export_is_an_sm_90a_cubin_named_as_such_with_a_valid_manifest(exports, case):
    folder, result = exports[case]
    doc = read_manifest(folder)
    assert validate(doc) == []
    (kernel,) = doc["kernels"]
    (launch,) = doc["launch"]
    assert kernel["arch"] == launch["arch"] == "sm_90a" and doc["requires"]["archs"] == ["sm_90a"]
    assert kernel["file"].endswith("_4096x4096x4096_sm_90a.cubin") and launch["source"].endswith("_sm_90a.cu")
    image = (folder / kernel["file"]).read_bytes()
    assert nvrtc.cubin_arch(image) == "sm_90"  # the ELF header does not say "a"; see the next test for that
    assert kernel["name"] == "gemm_wgmma" and kernel["name"] in function_symbols(image)
    config = default_config(*case)
    assert kernel["block"] == [128 * (1 + config["consumers"]), 1, 1] and kernel["cluster"] == [1, 1, 1]
    assert kernel["dynamic_smem_bytes"] == hs.smem_bytes(case[0], config) > 48 * 1024
    description = launch["description"]
    assert launch["arch_specific"] and description["family"] == "wgmma" and description["arch"] == "sm_90a"
    assert description["params"][:3] == ["map_a", "map_b", "map_c"] and set(description["tensor_maps"]) == {
        "map_a", "map_b", "map_c"}
    # the note says why: the arch-specific target (the export knows no family by name; the plan names the target)
    assert doc["ptx"]["files"] == [] and "sm_90a" in doc["ptx"]["note"] and doc["ptx"]["note"].startswith("no PTX")
    assert "arch-specific" in doc["ptx"]["note"]
    assert "no PTX" in result.stderr and doc["verification"][0]["status"] == COMPILED_ONLY
    assert launch["valid_for"]["n_multiple"] == launch["valid_for"]["k_multiple"] == 8  # TMA: 16-byte row strides


def test_the_cubin_is_the_sm_90a_build_of_the_exported_source(exports):
    folder, _ = exports[("bf16", "nt")]
    doc = read_manifest(folder)
    problem = GemmProblem(4096, 4096, 4096, "bf16", "nt")
    artifact = OpBackend("gemm", "cuda").compile(problem, doc["config"][0]["values"], export_target("sm_90a"))
    assert artifact.family == "wgmma" and artifact.arch == "sm_90a"
    assert artifact.resources["ptx_target"] == "sm_90a"  # the PTX .target line names the arch-specific target
    assert (folder / doc["launch"][0]["source"]).read_text() == artifact.source
    assert (folder / doc["kernels"][0]["file"]).read_bytes() == artifact.binary


def test_the_example_compiles_and_links_with_gpp_and_libdl(exports, toolchain, tmp_path):
    folder, _ = exports[("fp16", "nn")]
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-ldl",
                    "-lpthread")
    assert "libcuda" not in subprocess.run(["ldd", str(program)], capture_output=True, text=True).stdout


def test_the_wgmma_header_compiles_as_strict_c(exports, toolchain, tmp_path):
    folder, _ = exports[("bf16", "nt")]
    doc = read_manifest(folder)
    (tmp_path / "use.c").write_text(f'#include "{doc["files"]["c_header"]}"\n'
                                    f"int main(void) {{ return (int){doc['prefix']}_load(0); }}\n")
    build(toolchain["cc"], [str(tmp_path / "use.c")], tmp_path / "use", [str(folder), toolchain["include"]], "-std=c11",
          "-Wall", "-Wextra", "-Werror", "-pedantic", "-ldl", "-lpthread")


# ---- the runtime against the fake driver ------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_the_tensor_maps_are_encoded_at_launch_and_passed_in_the_kernels_order(exports, probes, fake_driver, case):
    dtype, layout = case
    config = default_config(dtype, layout)
    m, n, k = CALL
    args = [str(m), str(n), str(k), "stream"] + (["nt"] if layout == "nt" else [])
    out, log, buffers = run_probe(probes(case), args, fake_driver, cc="9.0")
    assert out[-1] == "status=0 ok", (out, log)
    assert [fields(line) for line in log if line.startswith("load ")] == [{"module": "1", "kind": "cubin", "sm": "90"}]
    smem = str(hs.smem_bytes(dtype, config))
    assert [fields(line)["value"] for line in log if line.startswith("set_attribute")] == [smem]
    (occupancy,) = [fields(line) for line in log if line.startswith("occupancy_blocks")]
    assert occupancy["block"] == "384" and occupancy["smem"] == smem

    maps = tensor_maps(log)
    assert [{key: t[key] for key in ("dims", "stride", "box")} for t in maps] == expected_maps(dtype, layout, config, m, n, k)
    assert [t["base"] for t in maps] == [buffers["a"], buffers["b"], buffers["c"]]
    assert {t["type"] for t in maps} == {str(MAP_TYPE[dtype])}
    assert {(t["swizzle"], t["l2"], t["oob"], t["interleave"]) for t in maps} == {
        (str(SWIZZLE_128B), str(L2_256B), str(OOB_ZERO), str(INTERLEAVE_NONE))}

    (launch,) = launches(log)
    assert launch["name"] == "gemm_wgmma" and launch["api"] == "ex" and launch["cluster"] == "none"
    assert [launch["map_a"], launch["map_b"], launch["map_c"]] == [t["id"] for t in maps]
    assert launch["grid"] == f"{grid_x(config, m, n, SMS)},1,1" and launch["block"] == "384,1,1" and launch["smem"] == smem
    assert [launch[key] for key in ("m", "n", "k", "ldc")] == [str(m), str(n), str(k), str(n)]
    assert launch["c"] == buffers["c"] and launch["bias"] == buffers["bias"]  # the probe passes a bias pointer always


def test_each_launch_encodes_its_own_maps_and_loading_happens_once(probes, fake_driver):
    out, log, _ = run_probe(probes(("fp16", "nn")), ["1024", "1024", "1024", "threads=6"], fake_driver)
    assert out[1:] == ["status=0 ok"] * 6
    assert len(launches(log)) == 6 and len(tensor_maps(log)) == 18
    assert sum(line.startswith("load ") for line in log) == 1
    ids = sorted(int(launch[name]) for launch in launches(log) for name in ("map_a", "map_b", "map_c"))
    assert ids == list(range(1, 19))  # every launch passed maps encoded for it


@pytest.mark.parametrize("args, fake, status", [
    (["1024", "1024", "1024"], {"cc": "8.0"}, "5"),  # an sm_90a cubin runs on compute capability 9.0 only
    (["1024", "1024", "1024"], {"cc": "10.0"}, "5"),
    (["1024", "1024", "1024", "misalign"], {}, "8"),  # TMA: 16-byte aligned bases
    (["1024", "1024", "1020"], {}, "9"),  # K % 8: rows of A are not 16-byte multiples
    (["256", "1024", "1024"], {}, "9"),  # below the configuration's smallest M (valid_for)
    (["1024", "1024", "1024"], {"hide": "cuTensorMapEncodeTiled"}, "2"),  # a driver without tensor maps
    (["1024", "1024", "1024"], {"hide": "cuOccupancyMaxActiveBlocksPerMultiprocessor"}, "2"),
    (["1024", "1024", "1024"], {"smem_optin": "166912"}, "6"),  # an H100 PCIe-like limit below the kernel's need
])
def test_what_the_runtime_refuses(probes, fake_driver, args, fake, status):
    out, log = run_with_fake(probes(("fp16", "nn")), args, fake_driver, **{"cc": "9.0", **fake})
    assert out[-1].startswith(f"status={status} "), (out, log)
    assert not launches(log)


def test_a_map_the_driver_refuses_is_a_driver_error_naming_the_call(probes, fake_driver):
    out, log = run_with_fake(probes(("bf16", "nt")), ["1024", "1024", "1024", "nt"], fake_driver, encode_fail="1")
    assert out[-1] == "status=3 a CUDA driver call failed call=cuTensorMapEncodeTiled"
    assert not launches(log)


@pytest.mark.parametrize("dtype, layout, epilogue, change, resident", [
    ("fp16", "nt", "none", {"cluster_m": 2, "persistent": 1, "stages": 4, "store": "direct"}, 10),
    ("bf16", "nn", "bias_silu", {"cluster_m": 2, "persistent": 0, "stages": 4, "store": "direct"}, None),
])
def test_clusters_launch_with_their_attribute_and_persistent_grids_with_the_occupancy(
        tmp_path, toolchain, fake_driver, dtype, layout, epilogue, change, resident):
    config = {**default_config(dtype, layout), **change}
    assert hs.hopper_space(GemmProblem(4096, 4096, 4096, dtype, layout, epilogue), export_target("sm_90a")).why_invalid(
        config) is None
    result = export_config(tmp_path, config, dtype=dtype, layout=layout, epilogue=epilogue)
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert validate(doc) == [] and doc["kernels"][0]["cluster"] == [2, 1, 1]
    program = build_probe(tmp_path / "out", toolchain, elem_bytes=2, dtype_code=DTYPE_CODE[dtype],
                          epilogue_code=next(e.code for e in EPILOGUES if e.name == epilogue))
    m, n, k = 2048, 2048, 1024
    fake = {"active_clusters": str(resident)} if resident else {}
    out, log, buffers = run_probe(program, [str(m), str(n), str(k)] + (["nt"] if layout == "nt" else []), fake_driver,
                                  **fake)
    assert out[-1] == "status=0 ok", (out, log)
    (launch,) = launches(log)
    assert launch["api"] == "ex" and launch["cluster"] == "2,1,1"
    occupancy = [fields(line) for line in log if line.startswith("occupancy_")]
    if config["persistent"]:
        assert occupancy == [{"name": "gemm_wgmma", "cluster": "2,1,1", "block": "384",
                              "smem": str(hs.smem_bytes(dtype, config)), "clusters": str(resident)}]
        assert launch["grid"] == f"{grid_x(config, m, n, resident)},1,1" == f"{2 * resident},1,1"
    else:
        assert occupancy == [] and launch["grid"] == f"{grid_x(config, m, n, 0)},1,1"
    assert [{key: t[key] for key in ("dims", "stride", "box")} for t in tensor_maps(log)] == expected_maps(
        dtype, layout, config, m, n, k)
    assert launch["bias"] == buffers["bias"] != "0"


# ---- choosing architectures -------------------------------------------------------------------------------------------

def test_a_k_pair_launches_as_a_cluster_of_one_by_two_over_a_grid_of_two_rows(tmp_path, toolchain, fake_driver):
    """cluster_k=2 (gemm_wgmma.cuh's K pair): the plan's second grid and cluster dimension, as the backend launches
    it; no occupancy query (one tile per CTA pair)."""
    config = {**default_config("fp16", "nt"), "tile_n": 128, "stages": 4, "store": "direct", "persistent": 0,
              "cluster_k": 2}
    result = export_config(tmp_path, config, dtype="fp16", layout="nt", shape="1568x512x4608")
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert validate(doc) == [] and doc["kernels"][0]["cluster"] == [1, 2, 1]
    program = build_probe(tmp_path / "out", toolchain, elem_bytes=2, dtype_code=DTYPE_CODE["fp16"])
    m, n, k = 1568, 512, 4608
    out, log, _ = run_probe(program, [str(m), str(n), str(k), "nt"], fake_driver)
    assert out[-1] == "status=0 ok", (out, log)
    (launch,) = launches(log)
    assert launch["api"] == "ex" and launch["cluster"] == "1,2,1" and launch["grid"] == f"{13 * 4},2,1"
    assert not [line for line in log if line.startswith("occupancy_")]


def test_a_wgmma_configuration_for_sm_90_is_built_as_sm_90a_with_a_warning(tmp_path):
    result = export_config(tmp_path, default_config("fp16", "nt"), dtype="fp16", layout="nt", arch="sm_90",
                           shape="2048x2048x2048")
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert [k["arch"] for k in doc["kernels"]] == ["sm_90a"] and not list((tmp_path / "out").rglob("*_sm_90.cubin"))
    assert "the sm_90 cubins are built for sm_90a" in " ".join(result.stderr.split())


def test_the_cache_chooses_per_architecture_and_ptx_comes_from_the_portable_one(tmp_path, toolchain, fake_driver):
    from tracea_cli.ops.gemm.families.engine_space import hand_picked

    problem = GemmProblem(4096, 4096, 4096, "fp16", "nt")
    wgmma, mma = default_config("fp16", "nt"), hand_picked(problem, export_target("sm_80"))[0]
    h200 = "NVIDIA H200 | sm_90 | 132 SMs | 140 GiB | 1980/3201 MHz"
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        for device, arch, config, ms in ((h200, "sm_90", wgmma, 0.19), ("NVIDIA A100 | sm_80", "sm_80", mma, 0.45)):
            key = cache_key(problem, device, arch)
            cache.set_winner(key, Trial(config, samples_ms=(ms,) * 3, median_ms=ms, cv=0.01, rel_error=2e-4))
    result = cli(["gemm", "--m", "4096", "--dtype", "fp16", "--layout", "nt", "--arch", "sm_80,sm_90", "--out",
                  str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert validate(doc) == []
    assert {c["arch"]: c["values"]["family"] for c in doc["config"]} == {"sm_80": "mma", "sm_90a": "wgmma"}
    assert {v["arch"]: (v["status"], v["device"]) for v in doc["verification"]} == {
        "sm_80": (VERIFIED, "NVIDIA A100 | sm_80"), "sm_90a": (VERIFIED, h200)}
    (ptx,) = doc["ptx"]["files"]
    assert ptx["from_arch"] == "sm_80" and "No PTX of the sm_90a configurations" in doc["ptx"]["note"]
    program = build_probe(tmp_path / "out", toolchain, elem_bytes=2, dtype_code=2)
    for cc, kernel, loaded in (("9.0", "gemm_wgmma", "sm=90"), ("8.6", "gemm_main", "sm=80"),
                               ("10.0", "gemm_main", "target=sm_80")):
        out, log = run_with_fake(program, ["4096", "4096", "4096", "nt"], fake_driver, cc=cc)
        assert out[-1] == "status=0 ok" and [l["name"] for l in launches(log)] == [kernel]
        assert loaded in next(line for line in log if line.startswith("load "))
    # sm_90 and sm_90a both asked: the sm_90a cubins serve compute capability 9.0, no second copy is built
    result = cli(["gemm", "--m", "4096", "--dtype", "fp16", "--layout", "nt", "--arch", "sm_90,sm_90a", "--out",
                  str(tmp_path / "both")], tmp_path)
    assert result.exit_code == 0, result.output
    assert [c["arch"] for c in read_manifest(tmp_path / "both")["config"]] == ["sm_90a"]


@pytest.mark.parametrize("args, says", [
    (["--arch", "sm_80,sm_90a"], "on sm_80: the wgmma family needs an sm_90 target, not sm_80"),
    (["--arch", "sm_100"], "on sm_100: the wgmma family needs an sm_90 target, not sm_100"),
    (["--arch", "sm_90a", "--dtype", "fp32"], "the wgmma family has no fp32 kernels"),
    (["--arch", "sm_90a", "--n", "4100"], "store=tma needs C's rows to be a multiple of 16 bytes"),
])
def test_wgmma_where_it_cannot_run_is_one_sentence_and_exit_2(tmp_path, args, says):
    (tmp_path / "c.json").write_text(json.dumps(default_config("fp16", "nn")))
    base = ["gemm", "--m", "4096", "--dtype", "fp16", "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "out")]
    result = cli(base + args, tmp_path)
    assert result.exit_code == 2, result.output
    assert result.output.count("error: ") == 1 and says in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out").exists()


def test_a_cached_wgmma_winner_alone_cannot_serve_sm_80(tmp_path):
    key = cache_key(GemmProblem(4096, 4096, 4096, "fp16", "nn"), "NVIDIA H200", "sm_90")
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        cache.set_winner(key, Trial(default_config("fp16", "nn"), samples_ms=(0.2,), median_ms=0.2, cv=0.0, rel_error=1e-4))
    result = cli(["gemm", "--m", "4096", "--dtype", "fp16", "--arch", "sm_80", "--out", str(tmp_path / "out")], tmp_path)
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and text.count("error: ") == 1, result.output
    assert "no cached winner of gemm 4096x4096x4096 fp16 nn is valid on sm_80" in text, result.output
    assert "the wgmma family needs an sm_90 target, not sm_80" in text and not (tmp_path / "out").exists()


# ---- the tables and the schema ------------------------------------------------------------------------------------------

MAP = {"tensor": "A", "dims": ["K", "M"], "row_stride": "lda", "box": [64, 128], "dtype": "fp16", "elem_bytes": 2,
       "swizzle": "128B", "interleave": "none", "l2_promotion": "256B", "oob_fill": "zero"}


SLOTS = c_header.Slots(ABI)


@pytest.mark.parametrize("change, says", [
    ({"box": [64, 300]}, "box"),  # TMA boxes hold at most 256 elements per dimension
    ({"box": [128, 64]}, "swizzle 128B"),  # 256 bytes per row do not fit a 128-byte swizzle
    ({"dtype": "fp64", "elem_bytes": 8}, "element type"),
    ({"elem_bytes": 4}, "fp16 with 4-byte elements"),
    ({"oob_fill": "nan"}, "out-of-bounds fill"),
    ({"swizzle": "96B"}, "swizzle"),
    ({"dims": ["K", "Q"]}, "size 'Q'"),  # the sizes, strides and tensors a map names are the op's ABI slots
    ({"row_stride": "ldq"}, "size 'ldq'"),
    ({"tensor": "D"}, "pointer 'D'"),
])
def test_the_header_refuses_a_tensor_map_the_runtime_cannot_encode(change, says):
    with pytest.raises(c_header.UnsupportedLaunch, match=says):
        c_header.tensor_map_row("map_a", TensorMap(**{**MAP, **change}), SLOTS)


def test_a_tiled3d_row_names_its_outer_stride_and_kind():
    spec = {**MAP, "row_stride": "", "dims": ["K", "M", "N"], "box": [64, 128, 1], "kind": "tiled3d",
            "strides": ["lda", "ldb"]}
    row = c_header.tensor_map_row("map_a", TensorMap(**spec), SLOTS)
    assert row.split()[3:10] == ["TRACEA_GEMM_A,", "{TRACEA_GEMM_K,", "TRACEA_GEMM_M,", "TRACEA_GEMM_N},",
                                 "TRACEA_GEMM_LDA,", "{64u,", "128u,"]
    assert "TRACEA_MAP_TILED3D, {TRACEA_GEMM_LDB, -1}, {0, 0}, {0, 0}, {1u, 1u, 1u, 1u}, 0u, 0u}," in row
    with pytest.raises(c_header.UnsupportedLaunch, match="box"):  # a box of 257 rows is no TMA box
        c_header.tensor_map_row("map_a", TensorMap(**{**spec, "box": [64, 257, 1]}), SLOTS)


def test_an_im2col_row_carries_its_corners_traversal_strides_and_load_and_bad_ones_are_refused():
    spec = {**MAP, "row_stride": "", "dims": ["K", "M", "N", "lda"], "box": [], "kind": "im2col",
            "strides": ["lda", "ldb", "ldc"], "lower": [-1, -2], "upper": [0, -1], "element_strides": [1, 2, 2, 1],
            "channels_per_pixel": 64, "pixels_per_column": 128}
    row = c_header.tensor_map_row("map_x", TensorMap(**spec), SLOTS)
    assert ("TRACEA_MAP_IM2COL, {TRACEA_GEMM_LDB, TRACEA_GEMM_LDC}, {-1, -2}, {0, -1}, {1u, 2u, 2u, 1u}, 64u, 128u},"
            in row)
    assert "{0u}, 2u," in row  # no box
    for bad in ({"lower": [-129, 0]}, {"element_strides": [1, 9, 1, 1]}, {"pixels_per_column": 1025},
                {"channels_per_pixel": 128}):  # 256 bytes: wider than the 128-byte swizzle
        with pytest.raises(c_header.UnsupportedLaunch):
            c_header.tensor_map_row("map_x", TensorMap(**{**spec, **bad}), SLOTS)


def test_a_tensor_map_row_names_the_ops_slots_and_the_drivers_enums():
    row = c_header.tensor_map_row("map_a", TensorMap(**MAP), SLOTS)
    assert row.split() == ["{/*", "map_a", "*/", "TRACEA_GEMM_A,", "{TRACEA_GEMM_K,", "TRACEA_GEMM_M},", "TRACEA_GEMM_LDA,",
                           "{64u,", "128u},", "2u,", "CU_TENSOR_MAP_DATA_TYPE_FLOAT16,", "CU_TENSOR_MAP_INTERLEAVE_NONE,",
                           "CU_TENSOR_MAP_SWIZZLE_128B,", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B,",
                           "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,", "TRACEA_MAP_TILED,", "{-1,", "-1},", "{0,", "0},",
                           "{0,", "0},", "{1u,", "1u,", "1u,", "1u},", "0u,", "0u},"]


def plan_with(params, maps=None) -> LaunchPlan:
    return LaunchPlan(steps=(KernelStep("gemm_wgmma", grid=("work_clusters", 1, 1), block=(384, 1, 1)),),
                      params=tuple(params), tensor_maps={name: TensorMap(**spec) for name, spec in (maps or {}).items()},
                      tile_m=128, tile_n=128, cluster_m=1)


def test_kernel_params_follow_the_plan_and_reject_unknown_ones():
    params, maps = c_header.kernel_params(plan_with(["map_a", "C", "M", "ldc"], {"map_a": MAP}), SLOTS)
    assert params == ("TRACEA_PARAM_MAP + 0", "TRACEA_GEMM_C", "TRACEA_PARAM_INT + TRACEA_GEMM_M",
                      "TRACEA_PARAM_INT + TRACEA_GEMM_LDC")
    assert maps == ("map_a",)
    # the engine families' plans pass the twelve pointers and sizes of TRACEA_GEMM_PARAMS
    engine = MMA.launch(GemmProblem(512, 512, 512, "fp16"), {
        "family": "mma", "block_m": 64, "block_n": 64, "block_k": 32, "warp_m": 32, "warp_n": 32, "stages": 3, "vec": 8,
        "group_m": 1, "split_k": 1})
    params, maps = c_header.kernel_params(engine, SLOTS)
    assert params[0] == "TRACEA_GEMM_A" and params[5] == "TRACEA_GEMM_WORKSPACE" and len(params) == 12 and maps == ()
    assert params[6:] == tuple(f"TRACEA_PARAM_INT + TRACEA_GEMM_{n}" for n in ("M", "N", "K", "LDA", "LDB", "LDC"))
    with pytest.raises(TraceaError, match="'stride'"):
        c_header.kernel_params(plan_with(["stride"]), SLOTS)
    with pytest.raises(TraceaError, match="no kernel parameter takes"):
        c_header.kernel_params(plan_with(["C"], {"map_a": MAP}), SLOTS)


def test_the_launch_grid_of_the_export_is_the_backends(exports):
    # A persistent grid needs the device's resident clusters: the fake driver's default SM count here.
    folder, _ = exports[("fp16", "nn")]
    doc = read_manifest(folder)
    (entry,) = doc["launch"]
    m, n, k = CALL
    assert backend_grid(doc, entry, "gemm_wgmma", m, n, k, resident=SMS) == f"{grid_x(default_config('fp16', 'nn'), m, n, SMS)},1,1"


@pytest.mark.parametrize("change, says", [
    (lambda d: d["launch"][0].update(arch="sm_90", arch_specific=False), "built for sm_90a, not sm_90"),
    (lambda d: d["launch"][0].update(arch_specific=False), "arch_specific is False"),
    (lambda d: d["kernels"][0].update(cluster=[2, 1, 1]), "cluster is [2, 1, 1]"),
    (lambda d: d["launch"][0]["description"].update(cluster_m=2), "disagrees with cluster_m"),
    (lambda d: d["launch"][0]["description"]["params"].remove("map_c"), "are no kernel parameter"),
    (lambda d: d["launch"][0]["description"]["tensor_maps"]["map_a"].update(box=[64, 512]), "above the maximum 256"),
    (lambda d: d["launch"][0]["description"]["tensor_maps"]["map_b"].update(swizzle="96B"), "is not one of"),
])
def test_the_manifest_validator_checks_the_hopper_fields(exports, change, says):
    doc = read_manifest(exports[("fp16", "nn")][0])
    change(doc)
    errors = validate(doc)
    assert any(says in e for e in errors), errors


# ---- on an H200 (the lead runs these) --------------------------------------------------------------------------------

def _hopper_gpu() -> str | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device is visible"
        cc = str(cupy.cuda.Device(0).compute_capability)
    except Exception as e:  # CuPy missing, or no driver
        return f"CuPy or a CUDA GPU is missing ({type(e).__name__}: {e})"
    return None if cc == "90" else f"the wgmma family needs compute capability 9.0, this GPU is {cc[:-1]}.{cc[-1]}"


GPU_CASES = [(dtype, layout, "none", {}) for dtype, layout in CASES] + [
    ("bf16", "nn", "bias_silu", {"cluster_m": 2, "stages": 4, "store": "direct"}),  # cluster, persistent, multicast B
    ("fp16", "nt", "bias_residual", {"cluster_m": 2, "persistent": 0, "stages": 4, "store": "direct"}),
]
# M above every case's smallest (group_m=8 orders at least five cluster rows); ragged sizes; the last one has more
# tiles than an H200 holds CTAs at once, so persistent CTAs loop. The host reference keeps each call to seconds.
GPU_CALLS = ((1032, 1032, 1024), (1160, 1032, 520), (2056, 4096, 256))


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("dtype, layout, epilogue, change", GPU_CASES)
def test_the_exported_wgmma_gemm_matches_the_reference_on_an_h200(tmp_path, toolchain, dtype, layout, epilogue, change):
    why = _hopper_gpu()
    if why:
        pytest.skip(why)
    config = {**default_config(dtype, layout), **change}
    result = export_config(tmp_path, config, dtype=dtype, layout=layout, epilogue=epilogue)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out"
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example", [str(folder), toolchain["include"]],
                    "-std=c++17", "-O2", "-ldl", "-lpthread")
    for m, n, k in GPU_CALLS:
        done = subprocess.run([str(program), str(m), str(n), str(k)], capture_output=True, text=True, timeout=600)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (config, m, n, k, done.stdout, done.stderr)
        assert report["nonfinite"] == 0 and report["rel_error"] <= report["bound"]


def test_split_k_launches_every_slice_then_the_second_pass(tmp_path, toolchain, fake_driver):
    """A split-K export: the workspace zeroed (the C runtime cannot know it is zero, so on every call), the main
    kernel over every tile's K slices (the C runtime's work items count them), then gemm_wgmma_splitk over M x N."""
    problem = GemmProblem(1024, 512, 8192, "bf16", "nt", "bias_silu")
    config = {"family": "wgmma", "tile_m": 128, "tile_n": 128, "stages": 4, "consumers": 2, "schedule": "cooperative",
              "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "direct", "split_k": 4}
    assert hs.hopper_space(problem, export_target("sm_90a")).why_invalid(config) is None
    result = export_config(tmp_path, config, dtype="bf16", layout="nt", epilogue="bias_silu", shape="1024x512x8192")
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert validate(doc) == []
    program = build_probe(tmp_path / "out", toolchain, elem_bytes=2, dtype_code=DTYPE_CODE["bf16"],
                          epilogue_code=next(e.code for e in EPILOGUES if e.name == "bias_silu"))
    m, n, k = 1024, 512, 8192
    out, log, buffers = run_probe(program, [str(m), str(n), str(k), "nt"], fake_driver)
    assert out[-1] == "status=0 ok", (out, log)
    main, second = launches(log)
    work = 8 * 4 * 4  # tiles x slices
    assert main["name"] == "gemm_wgmma" and main["grid"] == f"{min(work, SMS)},1,1"
    assert second["name"] == "gemm_wgmma_splitk" and second["grid"] == f"{m * n // 256},1,1"
    assert second["block"] == "256,1,1" and [second[key] for key in ("m", "n", "ldc")] == [str(m), str(n), str(n)]
    # both kernels get the workspace the call passed, zeroed before the main kernel: M x N fp32 sums
    assert main["workspace"] == second["workspace"] == buffers["workspace"] != "0"
    assert second["c"] == main["c"] == buffers["c"] and second["bias"] == buffers["bias"]
    memsets = [fields(line) for line in log if line.startswith("memset")]
    assert memsets == [{"ptr": buffers["workspace"], "value": "0", "bytes": str(4 * m * n)}]
    assert log.index(next(line for line in log if line.startswith("memset"))) < log.index(
        next(line for line in log if line.startswith("launch ")))
