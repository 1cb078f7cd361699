"""`tracea export` of plans whose TMA maps are not all 2-D tiled: the fa3 attention family (Q, K and V through 3-D
tiled maps) and conv2d's Hopper wgmma family (1x1: the GEMM op's plan over the convolution's GEMM view, in conv2d's
slot names; other convolutions: an im2col map over X, a 3-D tiled map over the filter, the 2-D map over Y).

Without a GPU the exported runtime runs against the fake libcuda (fake_libcuda.c), which logs every encoder call: the
maps it encodes for a call must be exactly those the CUDA backend encodes for the same problem (backends/cuda.py
`encode_map`, its driver calls recorded here), and the launch must pass them in the kernel's order with the plan's
grid and arguments. Calls the maps cannot read (fa3 with a batch stride that is not H head strides, conv2d in NCHW)
get TRACEA_ERROR_UNSUPPORTED_LAYOUT and launch nothing; a driver without cuTensorMapEncodeIm2col gets
TRACEA_ERROR_DRIVER_TOO_OLD. The headers build as strict C, with g++ and with nvcc. GPU tests (marked `gpu`) run the
examples of such exports against their float64 references on an H100/H200."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from export_helpers import build, cli, fields, needs_nvrtc, read_manifest, run_probe, run_with_fake

from tracea_cli.backends import cuda
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import validate
from tracea_cli.export.writer import export_target
from tracea_cli.ops.attention.families import wgmma as fa3
from tracea_cli.ops.attention.families import wgmma_space as fa3_space
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.families import wgmma_space as cs
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.registry import get_op

pytestmark = [needs_nvrtc, pytest.mark.timeout(600)]

MAP_TYPE = {"fp16": 6, "bf16": 9, "fp32": 7, "tf32": 11}  # CUtensorMapDataType in cuda.h
SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
L2 = {"none": 0, "64B": 1, "128B": 2, "256B": 3}

ATTENTION = dict(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16", causal=True)
CONV_1X1 = Conv2dProblem(32, 14, 14, 1024, 256, 1, 1, dtype="fp16")
CONV_3X3 = Conv2dProblem(32, 28, 28, 128, 128, 3, 3, 1, 1, 1, 1, dtype="fp16", epilogue="bias_relu")

PROBE = r"""
// Calls an fa3 attention export through tracea.hpp against the fake driver.
//   probe B H L CASE   (CASE: ok; padded: q and out with a batch stride of H*L*D + 64 elements; kv-padded: k, v)
#include EXPORT_HEADER
#include "tracea.hpp"
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 5) return 4;
  const int64_t b = std::atoi(argv[1]), h = std::atoi(argv[2]), l = std::atoi(argv[3]), d = 128;
  const std::string what = argv[4];
  const int64_t q_pad = what == "padded" ? 64 : 0, kv_pad = what == "kv-padded" ? 64 : 0;
  const tracea_driver* cu = nullptr;
  if (tracea_driver_get(&cu) != TRACEA_OK) return 3;
  CUdeviceptr q = 0, k = 0, v = 0, out = 0;
  cu->mem_alloc(&q, size_t(b * (h * l * d + q_pad)) * 2);
  cu->mem_alloc(&k, size_t(b * (h * l * d + kv_pad)) * 2);
  cu->mem_alloc(&v, size_t(b * (h * l * d + kv_pad)) * 2);
  cu->mem_alloc(&out, size_t(b * (h * l * d + q_pad)) * 2);
  using tracea::TensorView;
  auto view = [&](CUdeviceptr p, int64_t pad) {
    return TensorView(reinterpret_cast<void*>(p), {b, h, l, d}, {h * l * d + pad, l * d, d, 1}, tracea::DType::bf16, 0);
  };
  tracea::AttentionParams params;
  params.causal = true;
  const tracea::Status s =
      tracea::attention(view(q, q_pad), view(k, kv_pad), view(v, kv_pad), view(out, q_pad), params);
  std::fprintf(stderr, "probe: q=%llu k=%llu v=%llu out=%llu\n", (unsigned long long)q, (unsigned long long)k,
               (unsigned long long)v, (unsigned long long)out);
  std::printf("status=%d %s\n", int(s), tracea::status_string(s));
  return 0;
}
"""


def launches(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("launch ")]


def encoded(log: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in log if line.startswith("tensor_map ")]


def backend_encodes(monkeypatch, plan, values: dict, pointers: dict[str, int]) -> list[dict[str, str]]:
    """What backends/cuda.py's `encode_map` asks the driver for, for each map of `plan` in the kernel's parameter
    order (its tensors at `pointers`, sizes from the family's `values`), written as the fake driver logs it."""
    calls: list[dict[str, str]] = []

    def join(values) -> str:
        return ",".join(str(int(v)) for v in values)

    def tiled(ptr, dtype, dims, strides_bytes, box, swizzle="128B", l2_promotion="256B", what=""):
        calls.append({"type": str(MAP_TYPE[dtype]), "base": str(ptr), "dims": join(dims),
                      "stride": join(strides_bytes), "box": join(box), "interleave": "0",
                      "swizzle": str(SWIZZLE[swizzle]), "l2": str(L2[l2_promotion]), "oob": "0"})
        return b""

    def im2col(ptr, dtype, dims, strides_bytes, lower, upper, channels, pixels, element_strides, swizzle="128B",
               l2_promotion="256B"):
        calls.append({"kind": "im2col", "type": str(MAP_TYPE[dtype]), "base": str(ptr), "dims": join(dims),
                      "stride": join(strides_bytes), "lower": join(lower), "upper": join(upper),
                      "channels": str(channels), "pixels": str(pixels), "element_strides": join(element_strides),
                      "interleave": "0", "swizzle": str(SWIZZLE[swizzle]), "l2": str(L2[l2_promotion]), "oob": "0"})
        return b""

    monkeypatch.setattr(cuda, "encode_tiled", tiled)
    monkeypatch.setattr(cuda, "encode_im2col", im2col)
    sizes = {k: int(v) for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    for name in plan.params:
        if name in plan.tensor_maps:
            spec = plan.tensor_maps[name]
            cuda.encode_map(pointers[spec.tensor], spec, sizes)
    return calls


def without_id(entry: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in entry.items() if k != "id"}


# ---- fa3 attention ---------------------------------------------------------------------------------------------------

def fa3_config(shape: dict = ATTENTION) -> dict:
    problem = get_op("attention").problem(**shape)
    return fa3_space.hand_picked(problem, export_target("sm_90a"))[0]


def export_attention(tmp: Path, arch: str, shape: dict = ATTENTION) -> Path:
    (tmp / "config.json").write_text(json.dumps(fa3_config(shape)))
    options = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')} {v}" for k, v in shape.items()]
    result = cli(["attention", *" ".join(options).split(), "--backend", "cuda", "--arch", arch, "--config",
                  str(tmp / "config.json"), "--out", str(tmp / "out")], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out"


@pytest.fixture(scope="module")
def attention_export(tmp_path_factory) -> Path:
    return export_attention(tmp_path_factory.mktemp("fa3_export"), "sm_90")


@pytest.fixture(scope="module")
def attention_probe(attention_export, toolchain) -> Path:
    doc = read_manifest(attention_export)
    (attention_export / "probe.cpp").write_text(PROBE)
    return build(toolchain["cxx"], [str(attention_export / "probe.cpp")], attention_export / "probe",
                 [str(attention_export), toolchain["include"]], "-std=c++17", "-Wall", "-Wextra", "-Werror",
                 f'-DEXPORT_HEADER="{doc["files"]["c_header"]}"', "-ldl", "-lpthread")


def test_an_fa3_export_is_an_sm_90a_cubin_whose_manifest_has_the_3d_maps_and_their_requirement(attention_export):
    doc = read_manifest(attention_export)
    assert validate(doc) == []
    (launch,) = doc["launch"]
    assert launch["arch"] == "sm_90a"
    description = launch["description"]
    problem = get_op("attention").problem(**ATTENTION)
    assert description == json.loads(json.dumps(fa3.FA3.launch(problem, fa3_config()).as_dict()))
    assert {n: m["kind"] for n, m in description["tensor_maps"].items()} == {n: "tiled3d" for n in fa3.MAPS}
    assert description["requires"] == [{"value": "q_sb", "of": ["heads", "q_sh"]},
                                       {"value": "kv_sb", "of": ["kv_heads", "kv_sh"]}]
    (cubin,) = [k["file"] for k in doc["kernels"]]
    assert fa3.KERNEL in function_symbols((attention_export / cubin).read_bytes())


def test_an_fa3_call_encodes_the_maps_the_backend_encodes_and_launches_with_them(attention_export, attention_probe,
                                                                                fake_driver, monkeypatch):
    b, h, seq = 2, 16, 4096
    out, log, pointers = run_probe(attention_probe, [str(b), str(h), str(seq), "ok"], fake_driver, cc="9.0")
    assert out == ["status=0 ok"], (out, log)
    problem = get_op("attention").problem(**{**ATTENTION, "batch": b})
    plan = fa3.FA3.launch(problem, fa3_config())
    operands = {name: SimpleNamespace(shape=problem.shape(name)) for name in ("q", "k", "v", "out")}
    values = fa3.FA3.args(problem, operands)
    expected = backend_encodes(monkeypatch, plan, values, {n: int(p) for n, p in pointers.items()})
    maps = encoded(log)
    assert [without_id(m) for m in maps] == expected
    assert maps[0]["dims"] == f"128,{seq},{b * h}" and maps[0]["stride"] == f"256,{seq * 256}"  # (D, L, B·H)
    (launch,) = launches(log)
    step = plan.main_kernel
    assert launch["name"] == fa3.KERNEL and launch["maps"] == ",".join(m["id"] for m in maps)
    assert launch["grid"] == ",".join(map(str, plan.grid(step, {"M": seq, "N": b * h, "K": seq})))
    assert launch["block"] == f"{step.block[0]},1,1" and launch["smem"] == str(step.dynamic_smem_bytes)
    assert launch["pointers"] == ",".join(pointers[n] for n in ("q", "k", "v", "out")) + ",0"  # no lse
    ints = [n for n in fa3.PARAMS if n not in fa3.MAPS + ("q", "k", "v", "out", "lse")]
    assert launch["ints"] == ",".join(str(values[n]) for n in ints)


@pytest.mark.parametrize("case", ["padded", "kv-padded"])
def test_an_fa3_call_whose_batch_stride_is_not_h_head_strides_is_refused_and_launches_nothing(
        attention_probe, fake_driver, case):
    """The maps read (batch, head) as one dimension of the head stride: a padded batch stride would read the wrong
    rows, so the call says it cannot read that layout instead (fa2 would take it)."""
    out, log, _ = run_probe(attention_probe, ["2", "16", "4096", case], fake_driver, cc="9.0")
    assert out == ["status=12 no kernel of this export that fits the sizes reads the tensors in this layout (their "
                   "strides; see the manifest's launch[].description.requires and the op's guide)"], out
    assert not launches(log) and not encoded(log)


def test_the_fa3_headers_build_as_strict_c_and_with_nvcc(attention_export, toolchain, tmp_path):
    doc = read_manifest(attention_export)
    p = doc["prefix"]
    (tmp_path / "use.c").write_text(
        f'#include "{doc["files"]["c_header"]}"\n#include <stdio.h>\n'
        f"int main(void) {{ tracea_attention_args a; memset(&a, 0, sizeof a);\n"
        f'  printf("%d\\n", (int){p}_launch(&a, NULL)); {p}_unload(); return 0; }}\n')
    program = build(toolchain["cc"], [str(tmp_path / "use.c")], tmp_path / "use",
                    [str(attention_export), toolchain["include"]], "-std=c11", "-Wall", "-Wextra", "-Werror",
                    "-pedantic", "-ldl", "-lpthread")
    assert subprocess.run([str(program)], capture_output=True, text=True, timeout=30).stdout.split() == ["7"]
    # C++20 too (where `requires` is a keyword: no table member may be named so)
    build(toolchain["cxx"], [str(attention_export / "example.cpp")], tmp_path / "example_cxx20",
          [str(attention_export), toolchain["include"]], "-std=c++20", "-Wall", "-Wextra", "-Werror", "-pedantic",
          "-ldl", "-lpthread")
    nvcc_builds(attention_export / "example.cpp", attention_export, tmp_path / "example_nvcc")


def nvcc_builds(source: Path, folder: Path, out: Path) -> Path:
    """`source` compiled and linked by nvcc as CUDA C++ (the way a CUDA program includes the export), no warnings."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    return build(nvcc, ["-x", "cu", str(source)], out, [str(folder)], "-std=c++17", "-Werror", "all-warnings",
                 "-ldl", "-lpthread")


# ---- conv2d's wgmma family -------------------------------------------------------------------------------------------

def conv_config(problem: Conv2dProblem) -> dict:
    return cs.hand_picked(problem, export_target("sm_90a"))[0]


def conv_args(problem: Conv2dProblem) -> list[str]:
    p = problem
    return ["conv2d", "--n", str(p.n), "--h", str(p.h), "--w", str(p.w), "--c", str(p.c), "--k", str(p.k), "--r",
            str(p.r), "--s", str(p.s), "--pad", str(p.pad_h), "--stride", str(p.stride_h), "--dtype", p.dtype,
            "--epilogue", p.epilogue, "--backend", "cuda"]


def export_conv(tmp: Path, problem: Conv2dProblem, arch: str = "sm_90a") -> Path:
    (tmp / "config.json").write_text(json.dumps(conv_config(problem)))
    result = cli([*conv_args(problem), "--arch", arch, "--config", str(tmp / "config.json"), "--out",
                  str(tmp / "out")], tmp)
    assert result.exit_code == 0, result.output
    return tmp / "out"


@pytest.fixture(scope="module")
def conv_exports(tmp_path_factory, toolchain):
    """(folder, example program) of the 1x1 and the 3x3 export."""
    out = {}
    for name, problem in (("1x1", CONV_1X1), ("3x3", CONV_3X3)):
        folder = export_conv(tmp_path_factory.mktemp(f"conv2d_wgmma_{name}"), problem)
        example = build(toolchain["cxx"], [str(folder / "example.cpp")], folder / "example",
                        [str(folder), toolchain["include"]], "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
                        "-ldl", "-lpthread")
        out[name] = (folder, example)
    return out


def test_the_1x1_plan_is_written_in_conv2ds_names(conv_exports):
    doc = read_manifest(conv_exports["1x1"][0])
    assert validate(doc) == []
    description = doc["launch"][0]["description"]
    assert description["params"] == ["map_a", "map_b", "map_c", "Y", "bias", "residual", "workspace", "M", "N", "K",
                                     "out_c"]
    assert {n: (m["tensor"], m["dims"], m["row_stride"]) for n, m in description["tensor_maps"].items()} == {
        "map_a": ("X", ["K", "M"], "in_c"), "map_b": ("filter", ["K", "N"], "in_c"),
        "map_c": ("Y", ["N", "M"], "out_c")}


def test_the_im2col_plan_has_its_three_kinds_in_conv2ds_names(conv_exports):
    doc = read_manifest(conv_exports["3x3"][0])
    assert validate(doc) == []
    (launch,) = doc["launch"]
    maps = launch["description"]["tensor_maps"]
    assert {n: (m["tensor"], m.get("kind", "tiled")) for n, m in maps.items()} == {
        "map_x": ("X", "im2col"), "map_w": ("filter", "tiled3d"), "map_c": ("Y", "tiled")}
    assert maps["map_x"]["dims"] == ["in_c", "in_w", "in_h", "batch"] and maps["map_w"]["strides"] == ["in_c", "w_row"]
    # the filter size is compiled in (WG_CONV_R/S): the variant serves its own 3x3 only
    assert (launch["valid_for"]["r_min"], launch["valid_for"]["r_max"]) == (3, 3)


@pytest.mark.parametrize("name, problem", [("1x1", CONV_1X1), ("3x3", CONV_3X3)])
def test_a_wgmma_conv2d_call_encodes_the_maps_the_backend_encodes(conv_exports, fake_driver, monkeypatch, name,
                                                                  problem):
    """The example's channels_last call: the maps (X, the filter, Y) as the CUDA backend encodes them for the same
    problem, passed to the one launch in order; its NCHW call is refused (no transposes in these kernels)."""
    _, example = conv_exports[name]
    n, h, w = 4, problem.h - 1, problem.w + 3  # sizes the variant serves besides its own (its valid_for)
    out, log = run_with_fake(example, [str(n), str(h), str(w)], fake_driver, cc="9.0")
    report = json.loads(out[-1])
    assert report["nchw_served"] is False and report["rel_error_nchw"] is None  # refused, not launched
    call = Conv2dProblem(n, h, w, problem.c, problem.k, problem.r, problem.s, problem.stride_h, problem.stride_w,
                         problem.pad_h, problem.pad_w, dtype=problem.dtype, epilogue=problem.epilogue)
    maps = encoded(log)
    plan = cw.WGMMA.launch(call, conv_config(problem))
    names = [m for m in plan.params if m in plan.tensor_maps]
    pointers = {plan.tensor_maps[m].tensor: int(e["base"]) for m, e in zip(names, maps)}
    values = cw.WGMMA.args(call, {"X": pointers.get("X", pointers.get("A")), "W": pointers.get("W", pointers.get("B")),
                                  "Y": pointers.get("Y", pointers.get("C")), "bias": 1})
    assert [without_id(m) for m in maps] == backend_encodes(monkeypatch, plan, values, pointers)
    (launch,) = launches(log)
    assert launch["name"] == plan.main_kernel.name
    ids = [m["id"] for m in maps]
    if name == "1x1":
        assert [launch[k] for k in ("map_a", "map_b", "map_c")] == ids
        assert [launch[k] for k in ("m", "n", "k", "ldc")] == [str(call.gemm_m), str(call.k), str(call.c), str(call.k)]
    else:
        assert launch["maps"] == ",".join(ids)
        ints = ("M", "N", "C", "ldc", "P", "Q", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w")
        assert launch["ints"] == ",".join(str(values[k]) for k in ints)
        x = maps[0]
        assert (x["dims"], x["lower"], x["upper"], x["element_strides"]) == (
            f"{call.c},{w},{h},{n}", "-1,-1", "-1,-1", "1,1,1,1")


def test_without_cutensormapencodeim2col_the_driver_is_too_old(conv_exports, fake_driver):
    _, example = conv_exports["3x3"]
    out, log = run_with_fake(example, ["2", "28", "28"], fake_driver, cc="9.0", hide="cuTensorMapEncodeIm2col")
    report = json.loads(out[-1])
    assert report["ok"] is False and report["error"] == "the CUDA driver is older than this export needs"
    assert not launches(log) and not encoded(log)
    # the 1x1 export needs only cuTensorMapEncodeTiled
    out, log = run_with_fake(conv_exports["1x1"][1], ["4", "14", "14"], fake_driver, cc="9.0",
                             hide="cuTensorMapEncodeIm2col")
    assert len(launches(log)) == 1, (out, log)


def test_the_conv2d_wgmma_headers_build_with_nvcc(conv_exports, tmp_path):
    folder, _ = conv_exports["3x3"]
    nvcc_builds(folder / "example.cpp", folder, tmp_path / "example_nvcc")


# ---- on a GPU (H100 / H200) -----------------------------------------------------------------------------------------

def _hopper() -> str | None:
    """None where this machine has an sm_90 GPU CuPy sees, else why not."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device is visible"
        cc = cupy.cuda.Device(0).compute_capability
        return None if cc == "90" else f"the wgmma/TMA kernels need compute capability 9.0, not {cc}"
    except Exception as e:  # CuPy missing, or no driver
        return f"CuPy or a CUDA GPU is missing ({type(e).__name__}: {e})"


@pytest.mark.gpu
def test_an_exported_fa3_attention_matches_the_reference_on_an_h100_or_h200(tmp_path, toolchain):
    reason = _hopper()
    if reason:
        pytest.skip(reason)
    shape = {**ATTENTION, "batch": 2, "seq": 1024}
    folder = export_attention(tmp_path, "sm_90a", shape)
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O2", "-ldl", "-lpthread")
    for args in ([], ["1", "16", "1024", "16", "1024"]):  # the tuned shape, and batch 1 (served by the same variant)
        done = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=600)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (args, done.stdout, done.stderr)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [Conv2dProblem(2, 14, 14, 256, 128, 1, 1, dtype="fp16", epilogue="bias_relu"),
                                     Conv2dProblem(2, 28, 28, 64, 64, 3, 3, 1, 1, 1, 1, dtype="fp16"),
                                     Conv2dProblem(2, 29, 27, 64, 72, 3, 3, 2, 2, 1, 1, dtype="bf16",
                                                   epilogue="bias_residual_relu")],
                         ids=["1x1", "3x3", "3x3-stride2"])
def test_an_exported_wgmma_conv2d_matches_the_reference_on_an_h100_or_h200(problem, tmp_path, toolchain):
    reason = _hopper()
    if reason:
        pytest.skip(reason)
    folder = export_conv(tmp_path, problem)
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O2", "-ldl", "-lpthread")
    for args in ([], [str(problem.n + 1), str(problem.h - 2), str(problem.w + 1)]):
        done = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=600)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (args, done.stdout, done.stderr)
        assert report["nonfinite"] == 0 and report["nchw_served"] is False
