"""`tracea export lowrank-mlp` without a GPU: the acceptance command (shipped default, sm_90, NVRTC), a valid manifest
that says the configuration is unverified, a C header that compiles as strict C, an example that builds, and the
exported runtime run against the fake driver through `tracea::lowrank_mlp` with the seed's TensorViews: the fused
kernel's one launch, the two-GEMM kernels' two launches over T in the workspace, and bad calls refused."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from export_helpers import build, cli, fields, needs_nvrtc, read_manifest, run_probe, run_with_fake

from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import COMPILED_ONLY, validate

pytestmark = [needs_nvrtc, pytest.mark.timeout(600)]

PROBE = r"""
// Calls a lowrank-mlp export through tracea.hpp the way a program would, against the fake driver.
//   probe M D_IN RANK D_OUT CASE   (CASE: ok, no-bias, wrong-x, linear-weights)
#include EXPORT_HEADER
#include "tracea.hpp"
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  const int m = std::atoi(argv[1]), d_in = std::atoi(argv[2]), rank = std::atoi(argv[3]), d_out = std::atoi(argv[4]);
  if (argc != 6) return 4;
  const std::string what = argv[5];
  const tracea_driver* cu = nullptr;
  if (tracea_driver_get(&cu) != TRACEA_OK) return 3;
  CUdeviceptr x = 0, u = 0, v = 0, bias = 0, y = 0, ws = 0;
  cu->mem_alloc(&x, size_t(m) * d_in * 2);
  cu->mem_alloc(&u, size_t(d_in) * rank * 2);
  cu->mem_alloc(&v, size_t(rank) * d_out * 2);
  cu->mem_alloc(&bias, size_t(d_out) * 2);
  cu->mem_alloc(&y, size_t(m) * d_out * 2);
  using tracea::TensorView;
  const tracea::DType f16 = tracea::DType::Float16;
  const TensorView X(reinterpret_cast<void*>(x), {m, what == "wrong-x" ? d_in + 1 : d_in}, f16, 0);
  const TensorView U = what == "linear-weights" ? TensorView(reinterpret_cast<void*>(u), {rank, d_in}, f16, 0).t()
                                                : TensorView(reinterpret_cast<void*>(u), {d_in, rank}, f16, 0);
  const TensorView V = what == "linear-weights" ? TensorView(reinterpret_cast<void*>(v), {d_out, rank}, f16, 0).t()
                                                : TensorView(reinterpret_cast<void*>(v), {rank, d_out}, f16, 0);
  const TensorView B = what == "no-bias" ? TensorView() : TensorView(reinterpret_cast<void*>(bias), {d_out}, f16, 0);
  const TensorView Y(reinterpret_cast<void*>(y), {m, d_out}, f16, 0);
  tracea::LowrankMlpParams params;
  params.act = tracea::LowrankAct::ACT;
  params.workspace_bytes = tracea::lowrank_mlp_workspace_bytes(X, U, V, B, Y, params);
  if (params.workspace_bytes) {
    cu->mem_alloc(&ws, params.workspace_bytes);
    params.workspace = reinterpret_cast<void*>(ws);
  }
  std::fprintf(stderr, "probe: x=%llu y=%llu workspace=%llu bytes=%zu\n", (unsigned long long)x, (unsigned long long)y,
               (unsigned long long)ws, params.workspace_bytes);
  const tracea::Status s = tracea::lowrank_mlp(X, U, V, B, Y, params);
  std::printf("status=%d %s\n", int(s), tracea::status_string(s));
  return 0;
}
"""


def export(tmp: Path, *args: str) -> Path:
    result = cli(["lowrank-mlp", *args, "--dtype", "fp16", "--backend", "cuda", "--arch", "sm_90", "--config",
                  "default",                  "--out", str(tmp / "out")], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out"


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """The acceptance command of issue 15: M = 4096, d = 4096, rank 64, fp16, shipped default, sm_90."""
    return export(tmp_path_factory.mktemp("lowrank-fused"), "--m", "4096", "--d-in", "4096", "--rank", "64")


@pytest.fixture(scope="module")
def two_gemm(tmp_path_factory):
    """Rank 512: wider than the fused kernel's tile, so the shipped default is the two-GEMM family's."""
    return export(tmp_path_factory.mktemp("lowrank-two"), "--m", "1000", "--d-in", "1024", "--rank", "512", "--act",
                  "silu")


def probe(folder: Path, toolchain, act: str = "none") -> Path:
    doc = read_manifest(folder)
    (folder / "probe.cpp").write_text(PROBE)
    return build(toolchain["cxx"], [str(folder / "probe.cpp")], folder / "probe", [str(folder), toolchain["include"]],
                 "-std=c++17", "-Wall", "-Wextra", "-Werror", f'-DEXPORT_HEADER="{doc["files"]["c_header"]}"',
                 f"-DACT={act}", "-ldl", "-lpthread")


def launches(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("launch ")]


def test_the_acceptance_export_is_valid_compiled_only_and_holds_its_kernels(fused):
    doc = read_manifest(fused)
    assert validate(doc) == [] and doc["op"] == "lowrank-mlp" and doc["dtype"] == "fp16"
    assert (doc["act"], doc["bias"], doc["residual"], doc["layout"], doc["intermediate"]) == \
        ("none", True, False, "nn", "dtype")
    assert doc["shape"] == [{"m": 4096, "d_in": 4096, "rank": 64, "d_out": 4096}]
    (entry,) = doc["verification"]
    assert entry["status"] == COMPILED_ONLY and entry["device"] is None and doc["measurement"] is None
    (launch,) = doc["launch"]
    assert launch["valid_for"]["rank_min"] == launch["valid_for"]["rank_max"] == 64  # the rank is compiled in
    (cubin,) = [k["file"] for k in doc["kernels"]]
    assert function_symbols((fused / cubin).read_bytes()) >= {"lowrank_fused"}
    assert doc["files"]["op_header"] == "tracea_lowrank_mlp.h" and (fused / "tracea_lowrank_mlp.h").is_file()


def test_the_c_header_compiles_as_strict_c(fused, toolchain, tmp_path):
    doc = read_manifest(fused)
    p = doc["prefix"]
    (tmp_path / "use.c").write_text(
        f'#include "{doc["files"]["c_header"]}"\n#include <stdio.h>\n'
        f"int main(void) {{ tracea_lowrank_mlp_args a; memset(&a, 0, sizeof a);\n"
        f'  printf("%d %zu\\n", (int){p}_launch(&a, NULL), {p}_workspace_bytes(4096, 4096, 64, 4096)); {p}_unload();'
        " return 0; }\n")
    program = build(toolchain["cc"], [str(tmp_path / "use.c")], tmp_path / "use", [str(fused), toolchain["include"]],
                    "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ldl", "-lpthread")
    out = subprocess.run([str(program)], capture_output=True, text=True, timeout=30).stdout.split()
    assert out == ["7", "0"]  # invalid argument for null pointers; the fused kernel needs no workspace


def test_the_example_builds_and_says_when_there_is_no_driver(fused, toolchain, tmp_path):
    program = build(toolchain["cxx"], [str(fused / "example.cpp")], tmp_path / "example",
                    [str(fused), toolchain["include"]], "-std=c++17", "-Wall", "-Wextra", "-Werror", "-ldl",
                    "-lpthread")
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=30,
                          env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 2 and '"ok": false' in done.stdout and "driver" in done.stdout


def test_a_call_launches_the_fused_kernel_as_its_plan_says(fused, toolchain, fake_driver):
    doc = read_manifest(fused)
    (step,) = next(e for e in doc["launch"] if e["arch"] == "sm_90")["description"]["steps"]
    program = probe(fused, toolchain)
    out, log = run_with_fake(program, ["4096", "4096", "64", "4096", "ok"], fake_driver, cc="9.0")
    assert out == ["status=0 ok"], (out, log)
    (launch,) = launches(log)
    rows = int(step["grid"]["x"].split("/")[1])
    assert launch["name"] == "lowrank_fused" and launch["grid"] == f"{math.ceil(4096 / rows)},1,1"
    assert launch["block"] == ",".join(map(str, step["block"])) and launch["smem"] == str(step["dynamic_smem_bytes"])
    assert [launch[k] for k in ("m", "k", "r", "n", "t", "ldt")] == ["4096", "4096", "64", "4096", "0", "0"]


@pytest.mark.parametrize("case, status", [("no-bias", "11"), ("linear-weights", "11"), ("wrong-x", "7")])
def test_calls_the_export_cannot_serve_are_refused(fused, toolchain, fake_driver, case, status):
    """Without the bias the export was made with, or with nn.Linear-layout weights for an nn export: not exported;
    an x whose columns are not U's rows: an invalid argument. Nothing is launched."""
    program = probe(fused, toolchain)
    out, log = run_with_fake(program, ["4096", "4096", "64", "4096", case], fake_driver, cc="9.0")
    assert out[0].startswith(f"status={status} ") and not launches(log), (out, log)


def test_a_wide_rank_runs_two_gemms_over_t_in_the_workspace(two_gemm, toolchain, fake_driver):
    doc = read_manifest(two_gemm)
    description = next(e for e in doc["launch"] if e["arch"] == "sm_90")["description"]
    assert [s["name"] for s in description["steps"]] == ["lowrank_xu", "lowrank_tv"]
    (scratch,) = description["scratch"]
    assert scratch["name"] == "T" and scratch["source"] is None
    program = probe(two_gemm, toolchain, act="silu")
    out, log, buffers = run_probe(program, ["1000", "1024", "512", "1024", "ok"], fake_driver, cc="9.0")
    assert out == ["status=0 ok"], (out, log)
    xu, tv = launches(log)
    ldt = 512  # T's rows padded to 16 bytes: 512 fp16 elements already are
    assert int(buffers["bytes"]) == 1000 * ldt * 2 and xu["t"] == tv["t"] == buffers["workspace"] != "0"
    assert xu["ldt"] == tv["ldt"] == str(ldt) and xu["name"] == "lowrank_xu" and tv["name"] == "lowrank_tv"
    xu_rows = int(description["steps"][0]["grid"]["x"].split("/")[1])
    tiles = math.ceil(1000 / description["tile_m"]) * math.ceil(1024 / description["tile_n"])
    rank_blocks = description["steps"][0]["grid"]["y"]  # x·U: a block per row tile and column block of the rank
    assert isinstance(rank_blocks, int) and rank_blocks > 1
    assert xu["grid"] == f"{math.ceil(1000 / xu_rows)},{rank_blocks},1" and tv["grid"] == f"{tiles},1,1"
