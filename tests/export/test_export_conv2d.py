"""`tracea export conv2d`: the CLI on a machine without a GPU (NVRTC cubins, a manifest that says the configuration is
unverified), the op's C/C++ headers and example built with g++, and the exported runtime run against the fake
libcuda: the seed's C++ call `tracea::conv2d(x, w, bias, out, params)` with channels_last views (no copy) and with
NCHW / KCRS views (transposed into the workspace first), and the error codes of calls no variant serves."""

from __future__ import annotations

import json
import subprocess

import pytest

from export_helpers import build, cli, fields, needs_nvrtc, read_manifest, run_with_fake
from tracea_cli.backends import nvrtc
from tracea_cli.export.manifest import validate

pytestmark = needs_nvrtc
ARGS = ["conv2d", "--n", "32", "--h", "56", "--w", "56", "--c", "64", "--k", "64", "--r", "3", "--s", "3", "--pad", "1",
        "--dtype", "fp16", "--backend", "cuda", "--arch", "sm_90", "--config", "default"]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conv2d_export")
    result = cli([*ARGS, "--out", str(tmp / "out")], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out", result


@pytest.fixture(scope="module")
def example(export, toolchain):
    folder, _ = export
    return build(toolchain["cxx"], [str(folder / "example.cpp")], folder / "example", [str(folder), toolchain["include"]],
                 "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-ldl", "-lpthread")


def launches(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("launch ")]


def test_the_export_builds_without_a_gpu_and_says_the_configuration_is_unverified(export):
    folder, result = export
    doc = read_manifest(folder)
    assert validate(doc) == []
    assert doc["op"] == "conv2d" and doc["dtype"] == "fp16" and doc["epilogue"] == "none"
    assert (doc["stride_h"], doc["pad_w"], doc["dilation_h"]) == (1, 1, 1)
    assert doc["prefix"] == "tracea_conv2d_fp16_s1_p1_d1"
    assert doc["shape"] == [{"n": 32, "h": 56, "w": 56, "c": 64, "k": 64, "r": 3, "s": 3}]
    assert [v["status"] for v in doc["verification"]] == ["compiled-only"]
    assert "never verified on sm_90" in result.output
    (cubin,) = [k["file"] for k in doc["kernels"] if k["name"] == "conv2d_main"]
    assert nvrtc.cubin_arch((folder / cubin).read_bytes()) == "sm_90"
    assert {k["name"] for k in doc["kernels"]} >= {"conv2d_main", "conv2d_nchw_to_nhwc"}
    steps = doc["launch"][0]["description"]["steps"]
    assert [s.get("when") for s in steps if s["kind"] == "kernel"][:2] == ["x_is_nchw", "filter_is_kcrs"]
    header = (folder / "tracea_conv2d.h").read_text()
    assert "TRACEA_CONV2D_X_IS_NCHW" in header and "inline Status conv2d(const TensorView& x" in header
    assert '"conv2d", TRACEA_CONV2D_WORKSPACE, {TRACEA_CONV2D_M, TRACEA_CONV2D_N, TRACEA_CONV2D_K}' in header


def test_bad_geometry_is_one_sentence_and_exit_2(tmp_path):
    result = cli([*ARGS[:-6], "--r", "9", "--h", "4", "--w", "4", "--pad", "0", "--backend", "cuda", "--arch", "sm_90",
                  "--config", "default", "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 2 and "the filter spans 9 rows" in result.output
    assert not (tmp_path / "out").exists()


def test_the_example_builds_and_links_without_libcuda(example, tmp_path):
    linked = subprocess.run(["ldd", str(example)], capture_output=True, text=True).stdout
    assert "libcuda" not in linked
    done = subprocess.run([str(example)], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)})
    if "libcuda.so.1" not in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout:
        assert done.returncode == 2 and json.loads(done.stdout)["error"].startswith("the CUDA driver")


def test_channels_last_runs_in_place_and_nchw_is_transposed_into_the_workspace_first(export, example, fake_driver):
    """The example calls tracea::conv2d twice: channels_last views (one launch, X and W read where they are), then
    contiguous NCHW / KCRS views (two transposes into the workspace, then the main kernel reading the copies)."""
    folder, _ = export
    doc = read_manifest(folder)
    plan = doc["launch"][0]["description"]
    out, log = run_with_fake(example, ["1", "56", "56"], fake_driver, cc="9.0")
    first, x_copy, w_copy, second = launches(log)
    m = 56 * 56
    tiles = -(-m // plan["tile_m"]) * -(-64 // plan["tile_n"])
    assert first["name"] == second["name"] == "conv2d_main"
    assert first["grid"] == second["grid"] == f"{tiles},1,1"
    # conv2d_main's parameters as the fake logs them: X, filter, Y, bias, residual, workspace, N, H, W, C, K, R
    assert [first[k] for k in ("m", "n", "k", "lda", "ldb", "ldc")] == ["1", "56", "56", "64", "64", "3"]
    assert x_copy["name"] == w_copy["name"] == "conv2d_nchw_to_nhwc"
    assert x_copy["grid"] == f"{-(-m // 64)},1,1" and w_copy["grid"] == "16,1,1"
    assert [x_copy[k] for k in ("n", "c", "h", "w")] == ["1", "64", "56", "56"]
    assert [w_copy[k] for k in ("n", "c", "h", "w")] == ["64", "64", "3", "3"]
    assert second["a"] == x_copy["dst"] and second["b"] == w_copy["dst"]  # the copies, in the workspace
    assert first["a"] != second["a"] and first["c"] == second["c"]
    x_bytes = -(-(56 * 56 * 64 * 2) // 256) * 256
    assert int(w_copy["dst"]) - int(x_copy["dst"]) == x_bytes
    result = json.loads(out[-1])
    assert result["workspace_bytes"] == x_bytes + 64 * 9 * 64 * 2  # the copies; no split-K
    assert result["ok"] is False and result["nonfinite"] > 0  # the fake runs no kernel: Y stays poisoned


def test_sizes_no_variant_serves_get_an_error_code(export, example, fake_driver):
    """An H below the smallest the one variant serves (the manifest's valid_for) gets no launch, only the code."""
    h_min = read_manifest(export[0])["launch"][0]["valid_for"]["h_min"]
    assert h_min > 1
    out, log = run_with_fake(example, ["32", str(h_min - 1), "56"], fake_driver, cc="9.0")
    result = json.loads(out[-1])
    assert result["ok"] is False and "no tuned shape" in result["error"] and not launches(log)


PROBE = r"""
#include "tracea_conv2d_fp16_s1_p1_d1.h"
#include "tracea.hpp"
#include <cstdio>

int main() {
  static unsigned char memory[1 << 16];
  void* x_ptr = memory;
  // the seed's line: dims in NCHW order as torch reports them
  tracea::TensorView x(x_ptr, {1, 64, 224, 224}, tracea::DType::Float32, 0);
  tracea::TensorView w(x_ptr, {64, 64, 3, 3}, tracea::DType::Float32, 0);
  tracea::TensorView out = tracea::TensorView::channels_last(x_ptr, {1, 64, 224, 224}, tracea::DType::Float32, 0);
  tracea::Conv2dParams params;
  params.pad_h = params.pad_w = 1;
  tracea::Status status = tracea::conv2d(x, w, out, params);  // fp32: this program includes an fp16 export only
  if (!status) std::printf("fp32 %s\n", tracea::status_string(status));
  tracea::TensorView xh(x_ptr, {1, 64, 224, 224}, tracea::DType::Float16, 0);
  tracea::TensorView wh(x_ptr, {64, 64, 3, 3}, tracea::DType::Float16, 0);
  tracea::TensorView oh = tracea::TensorView::channels_last(x_ptr, {1, 64, 224, 224}, tracea::DType::Float16, 0);
  params.pad_h = 0;
  std::printf("geometry %s\n", tracea::status_string(tracea::conv2d(xh, wh, oh, params)));  // pad 0x1: not exported
  params.pad_h = 1;
  tracea::TensorView nchw_out(x_ptr, {1, 64, 224, 224}, tracea::DType::Float16, 0);
  std::printf("out %s\n", tracea::status_string(tracea::conv2d(xh, wh, nchw_out, params)));  // out must be channels_last
  std::printf("ok %d\n", int(static_cast<bool>(tracea::Status(TRACEA_OK))));
  return 0;
}
"""


def test_the_seeds_cpp_style_compiles_and_calls_without_an_export_get_their_codes(export, toolchain, fake_driver):
    folder, _ = export
    (folder / "probe_seed.cpp").write_text(PROBE)
    program = build(toolchain["cxx"], [str(folder / "probe_seed.cpp")], folder / "probe_seed",
                    [str(folder), toolchain["include"]], "-std=c++17", "-Wall", "-Wextra", "-Werror", "-ldl",
                    "-lpthread")
    out, log = run_with_fake(program, [], fake_driver, cc="9.0")
    not_exported = "no included export has this op, dtype and options (layout, epilogue, geometry)"
    assert out == [f"fp32 {not_exported}", f"geometry {not_exported}", "out invalid argument", "ok 1"]
    assert not launches(log)


def _device_arch() -> str | None:
    try:
        import cupy

        return f"sm_{cupy.cuda.Device(0).compute_capability}" if cupy.cuda.runtime.getDeviceCount() else None
    except Exception:  # CuPy missing, or no driver
        return None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, epilogue", [("fp16", "bias_relu"), ("fp32", "bias_residual_relu")])
def test_the_exported_conv2d_matches_the_reference_on_this_gpu(dtype, epilogue, tmp_path, toolchain):
    """The example on the GPU: channels_last views and NCHW/KCRS ones (transposed inside the call) both correct."""
    arch = _device_arch()
    if arch is None:
        pytest.skip("no CUDA device (CuPy or a driver is missing)")
    result = cli(["conv2d", "--n", "2", "--h", "17", "--w", "23", "--c", "24", "--k", "40", "--r", "3", "--s", "3",
                  "--pad", "1", "--stride", "2", "--dtype", dtype, "--epilogue", epilogue, "--backend", "cuda",
                  "--arch", arch, "--config", "default", "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out"
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O2", "-ldl", "-lpthread")
    for args in ([], ["3", "20", "19"], ["4", "11", "31"]):  # sizes the one variant serves (its valid_for)
        done = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=300)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (args, done.stdout, done.stderr)


def test_the_cpp_call_in_the_user_guide_compiles(tmp_path, toolchain):
    """docs/conv2d.md's C++ snippet, against an export of the epilogue it names."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "conv2d.md").read_text()
    snippet = re.search(r"```cpp\n(.*?)```", doc, re.S).group(1)
    includes = "\n".join(line for line in snippet.splitlines() if line.startswith("#include"))
    body = "\n".join(line for line in snippet.splitlines() if not line.startswith("#include"))
    result = cli([*ARGS[:ARGS.index("--dtype")], "--dtype", "fp16", "--epilogue", "bias_relu", "--backend", "cuda",
                  "--arch", "sm_90", "--config", "default", "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    program = (f"{includes}\n\nint run(void* x_ptr, void* w_ptr, void* b_ptr, void* y_ptr, void* workspace, "
               f"CUstream stream) {{\n{body}\n  return status ? 0 : 1;\n}}\n\nint main() {{ return 0; }}\n")
    (tmp_path / "out" / "guide.cpp").write_text(program)
    build(toolchain["cxx"], [str(tmp_path / "out" / "guide.cpp")], tmp_path / "guide",
          [str(tmp_path / "out"), toolchain["include"]], "-std=c++17", "-Wall", "-Wextra", "-Werror",
          "-Wno-unused-parameter", "-ldl", "-lpthread")


def test_a_plan_naming_a_value_the_abi_has_no_slot_for_is_refused_before_compiling_with_a_sentence(tmp_path,
                                                                                                   monkeypatch):
    """The wgmma family's plans export under conv2d's slot names (test_export_tma_kinds.py); a plan naming a value
    none of the ABI's slots holds is refused before anything compiles, with the names it lacks."""
    from tracea_cli.backends import cuda
    from tracea_cli.ops.conv2d.export import abi

    def no_compile(*args, **kwargs):
        raise AssertionError("the export compiled before refusing")

    monkeypatch.setattr(cuda, "compile_artifact", no_compile)
    monkeypatch.setitem(abi.WGMMA_SLOT_NAMES, "gemm_wgmma", {"A": "X", "B": "filter", "C": "Y"})  # lda etc. unnamed
    config = {"family": "wgmma", "tile_m": 128, "tile_n": 128, "stages": 4, "consumers": 2, "schedule": "cooperative",
              "cluster_m": 1, "persistent": 1, "group_m": 8, "store": "tma"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["conv2d", "--n", "32", "--h", "14", "--c", "1024", "--k", "256", "--r", "1", "--dtype", "fp16",
            "--backend", "cuda", "--arch", "sm_90", "--config", str(tmp_path / "config.json"), "--out",
            str(tmp_path / "out")]
    result = cli(args, tmp_path)
    assert result.exit_code == 2, result.output
    assert ("the wgmma configuration of conv2d n32 1024->256 @14x14 1x1 fp16 cannot be exported yet: its launch reads "
            "lda, ldb, ldc, which the conv2d export has no slot for") in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_a_serial_split_k_variant_zeroes_the_callers_workspace_on_every_call_then_launches_once(tmp_path, toolchain,
                                                                                                 fake_driver):
    """The exported runtime is handed the caller's workspace, which it cannot know is zero (the caller may share it
    with other kernels), so a `once` memset runs on every call (docs/conv2d.md, "Serial split-K"): a memset of the
    8-byte-per-output workspace, then conv2d_main alone (no reduction kernel), on each of the example's two calls."""
    from dataclasses import replace

    from tracea_cli.ops.conv2d.families.implicit_gemm_space import hand_picked
    from tracea_cli.ops.conv2d.problem import Conv2dProblem
    from tracea_cli.target import arch_target

    problem = Conv2dProblem(1, 7, 7, 512, 512, 3, 3, 1, 1, 1, 1, dtype="fp16")
    target = arch_target("sm_90")
    target = replace(target, limits=replace(target.limits, sm_count=132))
    config = next(c for c in hand_picked(problem, target) if c.get("splitk_mode") == "serial")
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["conv2d", "--n", "1", "--h", "7", "--w", "7", "--c", "512", "--k", "512", "--r", "3", "--s", "3",
            "--pad", "1", "--dtype", "fp16", "--backend", "cuda", "--arch", "sm_90",
            "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "out")]
    result = cli(args, tmp_path)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out"
    doc = read_manifest(folder)
    assert validate(doc) == []
    steps = doc["launch"][0]["description"]["steps"]
    assert [s for s in steps if s["kind"] == "memset"] == [
        {"kind": "memset", "buffer": "workspace", "bytes_per": "mn", "elem_bytes": 8, "once": True}]
    assert "conv2d_splitk_reduce" not in {k["name"] for k in doc["kernels"]}
    example = build(toolchain["cxx"], [str(folder / "example.cpp")], folder / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-ldl",
                    "-lpthread")
    _, log = run_with_fake(example, ["1", "7", "7"], fake_driver, cc="9.0")
    # the runtime's memsets zero the workspace (value 0); the example's own poison Y (value 255)
    events = [fields(line) | {"what": line.split()[0]} for line in log
              if line.startswith("launch ") or (line.startswith("memset ") and fields(line)["value"] == "0")]
    assert [e.get("name", e["what"]) for e in events] == [
        "memset", "conv2d_main", "conv2d_nchw_to_nhwc", "conv2d_nchw_to_nhwc", "memset", "conv2d_main"]
    for memset, main in ((events[0], events[1]), (events[4], events[5])):
        assert memset["ptr"] == main["workspace"] and memset["bytes"] == str(8 * 49 * 512)
