"""`tracea export` without a GPU: cubins for the named architectures, PTX, a valid manifest, headers that compile, an
example that builds and links without libcuda, and the exported runtime's logic run against a fake driver."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from dataclasses import dataclass
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
    run_with_fake,
    tune_command_problem,
)

from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import CompileFailed
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import Trial, TuningCache
from tracea_cli.config import Settings
from tracea_cli.errors import UsageError
from tracea_cli.export.defaults import load_defaults
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import COMPILED_ONLY, VERIFIED, validate
from tracea_cli.export.writer import ExportRequest, export, write_folder
from tracea_cli.ops.gemm.problem import GemmProblem

pytestmark = [needs_nvrtc, pytest.mark.timeout(600)]

SPLITK = {"family": "simt", "block_m": 64, "block_n": 64, "block_k": 8, "warp_m": 32, "warp_n": 32, "stages": 2,
          "vec": 4, "group_m": 1, "split_k": 2}
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


@pytest.fixture(scope="module")
def fp16(tmp_path_factory):
    """The acceptance check's export: gemm 512^3 fp16, shipped defaults, sm_80 and sm_90."""
    tmp = tmp_path_factory.mktemp("fp16")
    result = cli(["gemm", "--m", "512", "--dtype", "fp16", "--backend", "cuda", "--arch", "sm_80,sm_90",
                  "--config", "default", "--out", str(tmp / "out"), "--json"], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out", result


@pytest.fixture(scope="module")
def splitk(tmp_path_factory):
    """Two tuned shapes of an fp32 split-K configuration, sm_80 only: dispatch by shape, memsets, two kernels."""
    tmp = tmp_path_factory.mktemp("splitk")
    (tmp / "config.json").write_text(json.dumps(SPLITK))
    result = cli(["gemm", "--shapes", "256x256x256,1024x1024x1024", "--dtype", "fp32", "--arch", "sm_80",
                  "--config", str(tmp / "config.json"), "--out", str(tmp / "out")], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out"


def probe(folder: Path, toolchain, *, elem_bytes: int, dtype_code: int) -> Path:
    return build_probe(folder, toolchain, elem_bytes=elem_bytes, dtype_code=dtype_code)


@pytest.fixture(scope="module")
def fp16_probe(fp16, toolchain):
    return probe(fp16[0], toolchain, elem_bytes=2, dtype_code=2)


@pytest.fixture(scope="module")
def splitk_probe(splitk, toolchain):
    return probe(splitk, toolchain, elem_bytes=4, dtype_code=0)


# ---- what is written ----------------------------------------------------------------------------------------------------

def test_cubins_are_elf_for_the_named_architectures_and_hold_the_manifests_kernels(fp16):
    folder, _ = fp16
    doc = read_manifest(folder)
    # sm_90's shipped default is a Hopper-family (wgmma) kernel, built for sm_90a, the architecture wgmma needs
    assert {k["arch"] for k in doc["kernels"]} == {"sm_80", "sm_90a"}
    cubins = sorted(folder.rglob("*.cubin"))
    assert len(cubins) == 2
    for kernel in doc["kernels"]:
        image = (folder / kernel["file"]).read_bytes()
        # the ELF header does not tell sm_90a from sm_90 (nvrtc.cubin_arch)
        assert image[:4] == b"\x7fELF" and nvrtc.cubin_arch(image) == kernel["arch"].removesuffix("a")
        assert kernel["name"] in function_symbols(image)
        assert kernel["dynamic_smem_bytes"] > 0 and kernel["registers"] > 0 and kernel["alignment_bytes"] == 16


def test_ptx_of_the_lowest_architecture_ships_for_newer_gpus(fp16):
    folder, _ = fp16
    doc = read_manifest(folder)
    (ptx,) = doc["ptx"]["files"]
    assert ptx["arch"] == "compute_80" and ptx["from_arch"] == "sm_80"
    text = (folder / ptx["file"]).read_text()
    assert re.search(r"^\.target sm_80$", text, re.M) and ".entry gemm_main(" in text
    assert doc["toolchain"]["ptx_isa"] == re.search(r"^\.version (\S+)", text, re.M).group(1)


def test_the_manifest_is_valid_and_says_what_was_verified(fp16):
    folder, result = fp16
    doc = read_manifest(folder)
    assert validate(doc) == []
    for name in ("op", "shape", "dtype", "layout", "config", "kernels", "requires", "toolchain", "verification",
                 "measurement"):
        assert name in doc
    assert doc["op"] == "gemm" and doc["dtype"] == "fp16" and doc["shape"] == [{"m": 512, "n": 512, "k": 512}]
    assert doc["schema_version"] == 2 and (doc["layout"], doc["epilogue"]) == ("nn", "none")
    assert doc["files"] == {"c_header": "tracea_gemm_fp16_nn.h", "op_header": "tracea_gemm.h",
                            "runtime_header": "tracea_runtime.h", "cpp_header": "tracea.hpp", "example": "example.cpp",
                            "cmake": "CMakeLists.txt"}
    assert all((folder / name).is_file() for name in doc["files"].values())
    assert doc["toolchain"]["nvrtc"] == nvrtc.version() and doc["requires"]["min_driver"] == nvrtc.version()
    # Exported for sm_80 and sm_90 from the shipped defaults: each carries its entry's record in
    # profiles/defaults/gemm.json (the sm_80 one was only ever compiled; the sm_90 one says whether a Hopper GPU checked it).
    sm80, sm90 = doc["verification"]
    shipped = load_defaults("gemm")["defaults"][int(doc["config"][1]["origin_detail"].rsplit("#", 1)[1])]
    assert sm80["status"] == COMPILED_ONLY and sm90["status"] == shipped["verification"]["status"]
    assert sm90["status"] == COMPILED_ONLY or sm90["device"].startswith("NVIDIA H") and "sm_90" in sm90["device"]
    assert doc["measurement"] is None
    assert all(c["origin"] == "default" for c in doc["config"])
    printed = json.loads(result.stdout)
    assert printed["manifest"] == doc and sorted(printed["files"]) == sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert "never verified on sm_80" in result.stderr and "compiled-only" in result.stderr


def test_the_c_header_embeds_each_binary_byte_for_byte(fp16):
    folder, _ = fp16
    doc = read_manifest(folder)
    header = (folder / doc["files"]["c_header"]).read_text()
    for file in [k["file"] for k in doc["kernels"]] + [p["file"] for p in doc["ptx"]["files"]]:
        data = (folder / file).read_bytes()
        m = re.search(rf"/\* {re.escape(file)} \((\d+) bytes\) \*/\nstatic const unsigned char (\w+)\[(\d+)\][^{{]*= {{\n([^}}]*)}};",
                      header)
        assert m, file
        embedded = bytes(int(b) for b in m.group(4).replace("\n", " ").split(",") if b.strip())
        assert embedded.rstrip(b"\0") == data.rstrip(b"\0") and int(m.group(3)) == len(embedded)


def test_the_c_header_compiles_as_strict_c(fp16, toolchain, tmp_path):
    folder, _ = fp16
    doc = read_manifest(folder)
    p = doc["prefix"]
    (tmp_path / "use.c").write_text(
        f'#include "{doc["files"]["c_header"]}"\n#include <stdio.h>\n'
        f"int main(void) {{ tracea_gemm_args a; memset(&a, 0, sizeof a);\n"
        f'  printf("%d %zu\\n", (int){p}_launch(&a, NULL), {p}_workspace_bytes(512, 512)); {p}_unload(); return 0; }}\n')
    program = build(toolchain["cc"], [str(tmp_path / "use.c")], tmp_path / "use", [str(folder), toolchain["include"]],
                    "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ldl", "-lpthread")
    out = subprocess.run([str(program)], capture_output=True, text=True, timeout=30).stdout.split()
    assert out == [str(7), "0"]  # TRACEA_ERROR_INVALID_ARGUMENT for null pointers; no workspace without split-K


def test_the_op_header_declares_the_abis_slots_and_the_shared_headers_are_this_versions(fp16):
    from tracea_cli.export import c_header
    from tracea_cli.ops.gemm.export.abi import ABI, INTS, POINTERS

    folder, _ = fp16
    text = (folder / "tracea_gemm.h").read_text()
    assert text == c_header.render_op_header(ABI)
    assert (folder / "tracea_runtime.h").read_text() == c_header.render_runtime()
    assert (folder / "tracea.hpp").read_text() == c_header.render_cpp()
    pointers = ", ".join(f"TRACEA_GEMM_{name.upper()} = {i}" for i, name in enumerate(POINTERS))
    ints = ", ".join(f"TRACEA_GEMM_{name.upper()} = {i}" for i, name in enumerate(INTS))
    assert f"enum {{ {pointers} }};" in text and f"enum {{ {ints} }};" in text
    assert '"gemm", TRACEA_GEMM_WORKSPACE, {TRACEA_GEMM_M, TRACEA_GEMM_N, TRACEA_GEMM_K}' in text


def test_the_example_builds_and_links_without_libcuda_and_says_so_when_run(fp16, toolchain, tmp_path):
    folder, _ = fp16
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example", [str(folder), toolchain["include"]],
                    "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-ldl", "-lpthread")
    linked = subprocess.run(["ldd", str(program)], capture_output=True, text=True).stdout
    assert "libcuda" not in linked
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)})
    if "libcuda.so.1" not in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout:
        assert done.returncode == 2 and json.loads(done.stdout)["error"].startswith("the CUDA driver (libcuda.so.1) was not found")


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_builds_the_example(fp16, toolchain, tmp_path):
    folder, _ = fp16
    configure = subprocess.run(["cmake", "-S", str(folder), "-B", str(tmp_path / "build"),
                                f"-DTRACEA_CUDA_INCLUDE_DIR={toolchain['include']}", f"-DCMAKE_CXX_COMPILER={toolchain['cxx']}"],
                               capture_output=True, text=True, timeout=300)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    made = subprocess.run(["cmake", "--build", str(tmp_path / "build")], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert (tmp_path / "build" / "example").is_file()


# ---- the exported runtime, run against a fake driver ---------------------------------------------------------------------

def loads(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("load ")]


def launches(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("launch ")]


@pytest.mark.parametrize("cc, kind, which", [("9.0", "cubin", "90"), ("8.0", "cubin", "80"), ("8.9", "cubin", "80"),
                                             ("10.0", "ptx", "sm_80"), ("12.0", "ptx", "sm_80")])
def test_the_binary_for_the_devices_architecture_is_loaded(fp16_probe, fake_driver, cc, kind, which):
    out, log = run_with_fake(fp16_probe, ["512", "512", "512"], fake_driver, cc=cc)
    assert out[-1] == "status=0 ok"
    (load,) = loads(log)
    assert load["kind"] == kind and load.get("sm", load.get("target")) == which


@pytest.mark.parametrize("fake, status", [
    ({"cc": "7.5"}, 5),  # no cubin or PTX for Turing
    ({"driver": "12080"}, 2),  # older than the NVRTC 13.0 that built it
    ({"smem_optin": "65536"}, 6),  # the kernel needs more (mma 81408 bytes on sm_80, wgmma 128x256 more on sm_90)
    ({"func_max_threads": "128"}, 6),  # registers allow fewer threads than the block has
    ({"devices": "0"}, 4),
])
def test_the_device_is_checked_at_load(fp16_probe, fake_driver, fake, status):
    out, log = run_with_fake(fp16_probe, ["512", "512", "512"], fake_driver, **fake)
    assert out[-1].startswith(f"status={status} ")
    assert not launches(log)


def test_a_launch_follows_the_launch_description(fp16, fp16_probe, fake_driver):
    """The mma.sync kernel's launch (sm_80); the Hopper family's launches: test_export_wgmma.py."""
    doc = read_manifest(fp16[0])
    step = next(l for l in doc["launch"] if l["arch"] == "sm_80")["description"]
    out, log = run_with_fake(fp16_probe, ["512", "512", "512", "stream"], fake_driver, cc="8.0")
    assert out[-1] == "status=0 ok"
    (launch,) = launches(log)
    main = step["steps"][0]
    tiles = math.ceil(512 / step["tile_m"]) * math.ceil(512 / step["tile_n"])
    assert launch["name"] == "gemm_main" and launch["grid"] == f"{tiles},1,1"
    assert launch["block"] == ",".join(map(str, main["block"])) and launch["smem"] == str(main["dynamic_smem_bytes"])
    assert [launch[k] for k in ("m", "n", "k", "lda", "ldb", "ldc")] == ["512"] * 6
    assert launch["workspace"] == "0"  # no split-K: no workspace, and none is asked for
    raised = [fields(line) for line in log if line.startswith("set_attribute")]
    assert raised == [{"module": "1", "name": "gemm_main", "attribute": str(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
                       "value": str(main["dynamic_smem_bytes"])}]
    assert log[-2:] == ["unload module=1", "primary_ctx_release device=0"]


def test_loading_happens_once_for_many_threads(fp16_probe, fake_driver):
    out, log = run_with_fake(fp16_probe, ["512", "512", "512", "threads=8"], fake_driver)
    assert out[1:] == ["status=0 ok"] * 8
    assert len(loads(log)) == 1 and len(launches(log)) == 8
    assert sum(line.startswith("primary_ctx_retain") for line in log) == 1


def test_bad_calls_get_their_error_codes(fp16_probe, fake_driver):
    assert run_with_fake(fp16_probe, ["512", "512", "512", "misalign"], fake_driver)[0][-1].startswith("status=8 ")
    assert run_with_fake(fp16_probe, ["512", "512", "512", "nt"], fake_driver)[0][-1].startswith("status=11 ")
    assert run_with_fake(fp16_probe, ["512", "500", "512"], fake_driver)[0][-1].startswith("status=9 ")  # N % 8
    assert run_with_fake(fp16_probe, ["512", "512", "512", "load=0"], fake_driver)[0][-1] == "status=0 ok"
    assert run_with_fake(fp16_probe, ["512", "512", "512", "load=3"], fake_driver)[0][-1].startswith("status=4 ")


def test_split_k_zeroes_the_workspace_then_reduces(splitk, splitk_probe, fake_driver):
    out, log = run_with_fake(splitk_probe, ["256", "256", "256"], fake_driver, cc="8.0")
    assert out == [f"workspace_bytes={4 * 256 * 256}", "status=0 ok"]
    memset = next(fields(line) for line in log if line.startswith("memset"))
    main, reduce = launches(log)
    assert log.index(next(line for line in log if line.startswith("memset"))) < log.index(
        next(line for line in log if line.startswith("launch")))
    assert memset["bytes"] == str(4 * 256 * 256) and memset["value"] == "0" and memset["ptr"] == main["workspace"]
    assert main["name"] == "gemm_main" and main["grid"] == f"{(256 // 64) ** 2},1,2"
    assert reduce["name"] == "gemm_splitk_reduce" and reduce["grid"] == f"{256 * 256 // 256},1,1"
    doc = read_manifest(splitk)
    entry = next(e for e in doc["launch"] if e["shape"] == {"m": 256, "n": 256, "k": 256})
    assert [main["grid"], reduce["grid"]] == [backend_grid(doc, entry, name, 256, 256, 256) for name in
                                              ("gemm_main", "gemm_splitk_reduce")]


@pytest.mark.parametrize("shape, module", [("256 256 256", "1"), ("1024 1024 1024", "2"), ("900 900 900", "2"),
                                           ("300 260 200", "1")])
def test_calls_go_to_the_exact_or_nearest_valid_tuned_shape(splitk_probe, fake_driver, shape, module):
    out, log = run_with_fake(splitk_probe, shape.split(), fake_driver, cc="8.0")
    assert out[-1] == "status=0 ok"
    assert len(loads(log)) == 2 and {l["module"] for l in launches(log)} == {module}
    m, n, k = shape.split()
    assert [launches(log)[0][d] for d in ("m", "n", "k")] == [m, n, k]


def test_shapes_no_variant_serves_and_a_missing_workspace_are_refused(splitk, splitk_probe, fake_driver):
    doc = read_manifest(splitk)
    m_min = min(l["valid_for"]["m_min"] for l in doc["launch"])
    assert run_with_fake(splitk_probe, [str(m_min - 1), "256", "256"], fake_driver)[0][-1].startswith("status=9 ")
    assert run_with_fake(splitk_probe, ["256", "256", "258"], fake_driver)[0][-1].startswith("status=9 ")  # K % 4
    assert run_with_fake(splitk_probe, ["256", "256", "256", "no-workspace"], fake_driver)[0][-1].startswith("status=10 ")


def test_several_exports_live_in_one_program(fp16, splitk, toolchain, fake_driver, tmp_path):
    for folder in (fp16[0], splitk):
        for name in ("tracea_runtime.h", "tracea.hpp", "tracea_gemm.h"):
            assert (folder / name).read_text() == (fp16[0] / name).read_text()  # the same text in every export
    (tmp_path / "both.cpp").write_text("""
#include "tracea_gemm_fp16_nn.h"
#include "tracea_gemm_fp32_nn.h"
#include "tracea.hpp"
#include <cstdio>
#include <initializer_list>
int main() {
  const tracea_driver* cu;
  tracea_driver_get(&cu);
  CUdeviceptr p, ws;
  cu->mem_alloc(&p, 1 << 24);
  cu->mem_alloc(&ws, 1 << 24);
  for (tracea::DType t : {tracea::DType::fp16, tracea::DType::fp32, tracea::DType::bf16}) {
    tracea::TensorView a = tracea::TensorView::matrix(reinterpret_cast<void*>(p), t, 256, 256);
    tracea::GemmParams params;
    params.workspace = reinterpret_cast<void*>(ws);
    params.workspace_bytes = 1 << 24;
    std::printf("%d\\n", int(tracea::gemm(a, a, a, params)));
  }
}
""")
    program = build(toolchain["cxx"], [str(tmp_path / "both.cpp")], tmp_path / "both",
                    [str(fp16[0]), str(splitk), toolchain["include"]], "-std=c++17", "-Wall", "-Werror", "-ldl", "-lpthread")
    out, log = run_with_fake(program, [], fake_driver, cc="8.0")
    assert out == ["0", "0", "11"]  # fp16 and fp32 were exported, bf16 was not
    assert {l["name"] for l in launches(log)} == {"gemm_main", "gemm_splitk_reduce"} and len(loads(log)) == 3


def test_an_arch_specific_export_has_no_ptx_and_runs_on_its_own_architecture_only(tmp_path, toolchain, fake_driver):
    (tmp_path / "c.json").write_text(json.dumps({**SPLITK, "split_k": 1}))
    result = cli(["gemm", "--m", "256", "--arch", "sm_90a", "--config", str(tmp_path / "c.json"), "--out",
                  str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert doc["ptx"]["files"] == [] and doc["ptx"]["note"].startswith("no PTX") and "no PTX" in result.stderr
    (launch,) = doc["launch"]
    assert launch["arch"] == "sm_90a" and launch["arch_specific"] and launch["file"].endswith("_sm_90a.cubin")
    assert nvrtc.cubin_arch((tmp_path / "out" / launch["file"]).read_bytes()) == "sm_90"
    program = probe(tmp_path / "out", toolchain, elem_bytes=4, dtype_code=0)
    out, log = run_with_fake(program, ["256", "256", "256"], fake_driver, cc="9.0")
    assert out[-1] == "status=0 ok" and loads(log)[0]["sm"] == "90"
    assert run_with_fake(program, ["256", "256", "256"], fake_driver, cc="10.0")[0][-1].startswith("status=5 ")


def test_a_sliced_k_mma_configuration_exports_and_launches_its_block_of_k_slices(tmp_path, toolchain, fake_driver):
    """slice_k multiplies the block's warps and may raise shared memory: both travel in the launch description."""
    from tracea_cli.ops.gemm.families.engine_space import tiling

    config = {"family": "mma", "block_m": 32, "block_n": 32, "block_k": 256, "warp_m": 32, "warp_n": 32,
              "stages": 3, "split_k": 1, "group_m": 1, "vec": 8, "slice_k": 8}
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = cli(["gemm", "--m", "16", "--n", "256", "--k", "1024", "--dtype", "fp16", "--arch", "sm_80",
                  "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    (entry,) = read_manifest(tmp_path / "out")["launch"]
    (main,) = entry["description"]["steps"]
    t = tiling(GemmProblem(16, 256, 1024, dtype="fp16"), config)
    assert main["block"] == [t.threads, 1, 1] == [8 * 32, 1, 1] and main["dynamic_smem_bytes"] == t.smem_bytes
    program = probe(tmp_path / "out", toolchain, elem_bytes=2, dtype_code=2)
    out, log = run_with_fake(program, ["16", "256", "1024"], fake_driver, cc="8.0")
    assert out[-1] == "status=0 ok"
    (launch,) = launches(log)
    assert launch["grid"] == "8,1,1" and launch["block"] == "256,1,1" and launch["smem"] == str(t.smem_bytes)


# ---- from the tuning cache ----------------------------------------------------------------------------------------------

def test_a_cached_winner_exports_with_its_verification_and_measurement(tmp_path):
    device = "NVIDIA H200 | sm_90 | 132 SMs | 140 GiB | 1980/3201 MHz"
    config = {**SPLITK, "split_k": 1}
    key = cache_key(GemmProblem(256, 256, 256, "fp32", "nt"), device, "sm_90")
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        cache.set_winner(key, Trial(config, samples_ms=(0.011, 0.012, 0.013), median_ms=0.012, cv=0.05, rel_error=3e-7))
    result = cli(["gemm", "--m", "256", "--layout", "nt", "--arch", "sm_90,sm_86", "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert validate(doc) == [] and doc["layout"] == "nt"
    by_arch = {v["arch"]: v for v in doc["verification"]}
    assert by_arch["sm_90"]["status"] == VERIFIED and by_arch["sm_90"]["device"] == device
    assert by_arch["sm_90"]["rel_error"] == 3e-7 and by_arch["sm_86"]["status"] == COMPILED_ONLY
    assert doc["measurement"] == [{"shape": {"m": 256, "n": 256, "k": 256}, "arch": "sm_90", "device": device,
                                   "median_ms": 0.012, "cv": 0.05, "n": 3, "date": doc["measurement"][0]["date"]}]
    assert [c["values"] for c in doc["config"]] == [config, config] and "on sm_86" in result.stderr
    assert "verified on NVIDIA H200" in result.stdout and "0.0120 ms" in result.stdout


# ---- bad input: one sentence, exit 2, nothing half-written ---------------------------------------------------------------

def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp" in p.name or ".old-" in p.name)


@pytest.mark.parametrize("args, says", [
    (["--m", "512", "--dtype", "fp16", "--arch", "sm_80,sm_90"], "holds no tuned configuration for gemm 512x512x512 fp16 nn"),
    (["--m", "512", "--arch", "sm_12345", "--config", "default"], "cannot build for sm_12345"),
    (["--m", "512", "--arch", "ampere", "--config", "default"], "is not a CUDA architecture name"),
    (["--m", "512", "--arch", "sm_90", "--config", "CONFIG"], "outside the search space of gemm 512x512x512 fp32 nn on sm_90: block_m=48"),
    (["--m", "512", "--arch", "sm_90", "--config", "MISSING"], "the configuration file MISSING does not exist"),
    (["--m", "512", "--arch", "sm_90", "--backend", "cpu", "--config", "default"], "the cpu backend has no export"),
    (["--shapes", "512x512", "--arch", "sm_90"], "is not MxNxK"),
    (["--m", "512", "--m", "256", "--m", "128", "--n", "1", "--n", "2", "--arch", "sm_90"], "--n was given 2 times"),
    (["--m", "512", "--config", "default"], "--arch is required"),
    (["--m", "512", "--dtype", "fp8", "--arch", "sm_90"], "unknown dtype 'fp8'"),
])
def test_bad_input_is_one_sentence_and_exit_2_with_nothing_written(tmp_path, args, says):
    (tmp_path / "c.json").write_text(json.dumps({**SPLITK, "block_m": 48}))
    args = [a.replace("CONFIG", str(tmp_path / "c.json")).replace("MISSING", str(tmp_path / "no.json")) for a in args]
    says = says.replace("MISSING", str(tmp_path / "no.json"))
    result = cli(["gemm", *args, "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and says in errors[0], result.output
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_folders_above_out_are_made_only_when_the_export_is_written(tmp_path):
    result = cli(["gemm", "--m", "64", "--arch", "sm_80", "--out", str(tmp_path / "a" / "b" / "out")], tmp_path)
    assert result.exit_code == 2 and "holds no tuned configuration" in result.output
    assert not (tmp_path / "a").exists()
    result = cli(["gemm", "--m", "64", "--arch", "sm_80", "--config", "default", "--out", str(tmp_path / "a" / "b" / "out")],
                 tmp_path)
    assert result.exit_code == 0 and (tmp_path / "a" / "b" / "out" / "manifest.json").is_file()


def test_hint_says_how_to_get_a_winner(tmp_path):
    result = cli(["gemm", "--m", "512", "--dtype", "fp16", "--arch", "sm_90", "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 2, result.output
    hint = " ".join(result.output.split()).partition(" hint: ")[2]  # the hint may wrap
    assert hint.startswith("Tune it on a GPU with `tracea tune gemm ") and "--config default" in hint, result.output
    assert tune_command_problem(hint) == (GemmProblem(512, 512, 512, "fp16", "nn"), "cuda")


@pytest.mark.parametrize("out, says", [("FILE/sub/out", "FILE is a file"), ("FILE", "is a file, not a folder"),
                                       ("FOREIGN", "holds files that are not a tracea export")])
def test_an_unwritable_or_occupied_out_is_refused(tmp_path, out, says):
    (tmp_path / "FILE").write_text("a file")
    (tmp_path / "FOREIGN").mkdir()
    (tmp_path / "FOREIGN" / "notes.txt").write_text("mine")
    result = cli(["gemm", "--m", "64", "--arch", "sm_80", "--config", "default", "--out", str(tmp_path / out)], tmp_path)
    assert result.exit_code == 2 and says in result.output, result.output
    assert (tmp_path / "FILE").read_text() == "a file" and (tmp_path / "FOREIGN" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "FOREIGN").iterdir()) == ["notes.txt"] and leftovers(tmp_path) == []


@dataclass(frozen=True)
class FailsFor(OpBackend):
    """The GEMM ops' CUDA backend, except that compiling for one architecture fails (as a broken toolchain would)."""

    op_name: str = "gemm"
    name: str = "cuda"
    arch: str = "sm_90"

    def compile(self, problem, config, target):
        if target.arch == self.arch:
            raise CompileFailed("ptxas fatal: out of memory")
        return super().compile(problem, config, target)


def test_a_failure_midway_leaves_an_earlier_export_as_it_was(tmp_path):
    settings = Settings(cache_dir=tmp_path / "cache", data_dir=tmp_path / "data")
    request = ExportRequest(problems=(GemmProblem(64, 64, 64),), archs=("sm_80",), out=tmp_path / "out", config="default")
    first = export(request, settings=settings)
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert len(before) == len(first.files)
    with pytest.raises(Exception, match="did not compile for sm_90: ptxas fatal"):
        export(ExportRequest(**{**request.__dict__, "archs": ("sm_80", "sm_90")}), settings=settings,
               builder=FailsFor(arch="sm_90"))
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before
    assert leftovers(tmp_path) == []
    with pytest.raises(UsageError, match="cannot write the export"):  # a file cannot be created midway through writing
        write_folder(tmp_path / "out", {"a.txt": b"1", "a.txt/b.txt": b"2"})
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before
    assert leftovers(tmp_path) == []


def test_a_new_export_replaces_an_earlier_one_whole(tmp_path):
    settings = Settings(cache_dir=tmp_path / "cache", data_dir=tmp_path / "data")
    request = ExportRequest(problems=(GemmProblem(64, 64, 64),), archs=("sm_80", "sm_86"), out=tmp_path / "out",
                            config="default")
    export(request, settings=settings)
    second = export(ExportRequest(**{**request.__dict__, "archs": ("sm_86",)}), settings=settings)
    on_disk = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert on_disk == sorted(second.files) and not any("sm_80" in f for f in on_disk)
    assert leftovers(tmp_path) == []


SEED_STYLE = r"""
#include EXPORT_HEADER
#include "tracea.hpp"
#include <cstdio>

int main() {
  const tracea_driver* cu = nullptr;
  if (tracea_driver_get(&cu) != TRACEA_OK) return 1;
  CUdeviceptr a = 0, b = 0, c = 0;
  const size_t bytes = size_t(512) * 512 * 2;
  cu->mem_alloc(&a, bytes);
  cu->mem_alloc(&b, bytes);
  cu->mem_alloc(&c, bytes);
  // the seed's lines: a shape list, the seed's dtype names, a device ordinal; a Status tested as a bool
  tracea::TensorView A(reinterpret_cast<void*>(a), {512, 512}, tracea::DType::Float16, 0);
  tracea::TensorView B(reinterpret_cast<void*>(b), {512, 512}, tracea::DType::Float16, 0);
  tracea::TensorView C(reinterpret_cast<void*>(c), {512, 512}, tracea::DType::Float16, 0);
  tracea::GemmParams params;
  tracea::Status status = tracea::gemm(A, B, C, params);
  if (!status) {
    std::printf("failed %s\n", tracea::status_string(status));
    return 1;
  }
  tracea::TensorView F(reinterpret_cast<void*>(c), {512, 512}, tracea::DType::Float32, 0);
  status = tracea::gemm(A, B, F, params);  // mixed dtypes: refused with its code
  std::printf("%s / %s\n", status ? "ok" : "refused", tracea::status_string(status));
  return 0;
}
"""


def test_the_seeds_cpp_style_compiles_and_launches(fp16, toolchain, fake_driver, tmp_path):
    """`tracea::TensorView A(ptr, {M, K}, tracea::DType::Float16, 0)` and `if (!status)`, as the seed writes them,
    against the gemm export: the good call launches once, the mixed-dtype call gets its code and no launch."""
    folder = fp16[0]
    header = next(p.name for p in folder.glob("tracea_gemm_*.h"))
    (tmp_path / "seed.cpp").write_text(SEED_STYLE)
    program = build(toolchain["cxx"], [str(tmp_path / "seed.cpp")], tmp_path / "seed", [str(folder), toolchain["include"]],
                    f'-DEXPORT_HEADER="{header}"', "-std=c++17", "-Wall", "-Wextra", "-Werror", "-ldl", "-lpthread")
    out, log = run_with_fake(program, [], fake_driver, cc="9.0")
    assert len(out) == 1 and out[0].startswith("refused / "), out
    assert len(launches(log)) == 1


def test_the_gemv_serial_split_k_zeroes_its_counters_on_every_call_then_launches_once(tmp_path, toolchain,
                                                                                       fake_driver):
    """The gemv kernel's one-launch split-K exported: the caller's workspace may be shared, so the `once` memset of
    the counters (4 bytes per element of C) runs on every call, then gemm_main alone (no gemm_splitk_sum), the
    workspace 4·(split_k + 1) bytes per element (docs/engine.md, "GEMV: split-K in one launch")."""
    config = {"family": "simt", "kernel": "gemv", "block_m": 1, "block_n": 128, "block_k": 64, "warp_m": 16,
              "warp_n": 32, "stages": 2, "vec": 4, "group_m": 1, "split_k": 4, "splitk_mode": "serial"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = cli(["gemm", "--m", "1", "--n", "512", "--k", "1024", "--dtype", "fp32", "--arch", "sm_80",
                  "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    doc = read_manifest(tmp_path / "out")
    assert validate(doc) == []
    steps = doc["launch"][0]["description"]["steps"]
    assert [s for s in steps if s["kind"] == "memset"] == [
        {"kind": "memset", "buffer": "workspace", "bytes_per": "mn", "elem_bytes": 4, "once": True}]
    assert {k["name"] for k in doc["kernels"]} == {"gemm_main"}
    out, log = run_with_fake(probe(tmp_path / "out", toolchain, elem_bytes=4, dtype_code=0), ["1", "512", "1024"],
                             fake_driver, cc="8.0")
    assert out == [f"workspace_bytes={4 * 5 * 512}", "status=0 ok"]
    memset = next(fields(line) for line in log if line.startswith("memset"))
    (main,) = launches(log)
    assert memset["bytes"] == str(4 * 512) and memset["value"] == "0" and memset["ptr"] == main["workspace"]
    assert main["name"] == "gemm_main" and main["grid"] == f"{512 // 128},1,4"
