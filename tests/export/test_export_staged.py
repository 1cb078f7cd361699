"""`tracea export` of wgmma configurations behind the staging pre-pass (docs/kernel-abi.md, "Staging"): K not a
multiple of 16 bytes (A, and B in nt, copied with a padded leading dimension), N not a multiple of 16 bytes (B in nn
copied likewise; C has no tensor map) and tf32 nn (B transposed). The C
header places the scratch in the caller's workspace, launches the staging kernels first with their grids and
arguments, and encodes the tensor maps over the copies; checked against the fake driver without a GPU. GPU tests
(marked) run the example on an H200."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from export_helpers import (
    backend_grid,
    backend_plan,
    build,
    build_probe,
    cli,
    fields,
    needs_nvrtc,
    read_manifest,
    run_probe,
)

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.export import c_header
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import validate
from tracea_cli.export.writer import export_target
from tracea_cli.ops.gemm.export.abi import ABI
from tracea_cli.ops.gemm.families import wgmma_space as hs
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import LaunchPlan, Scratch, check_grid_rule

pytestmark = [needs_nvrtc, pytest.mark.timeout(300)]

DTYPE_CODE = {"tf32": 1, "fp16": 2, "bf16": 3}  # tracea::DType
ELEM = {"tf32": 4, "fp16": 2, "bf16": 2}
BACKEND = OpBackend("gemm", "cuda")
# name: (dtype, layout, tuned shape, the staging kernels in launch order)
CASES = {
    "fp16-nn-k777": ("fp16", "nn", (1000, 3000, 777), ["gemm_stage_a"]),
    "bf16-nt-k777": ("bf16", "nt", (1000, 3000, 777), ["gemm_stage_a", "gemm_stage_b"]),
    "tf32-nn": ("tf32", "nn", (4096, 4096, 4096), ["gemm_stage_b"]),
    "fp16-nn-ragged": ("fp16", "nn", (4095, 4097, 4091), ["gemm_stage_a", "gemm_stage_b"]),
    "bf16-nt-ragged": ("bf16", "nt", (3001, 5003, 2999), ["gemm_stage_a", "gemm_stage_b"]),
}


def b_staged_as(dtype: str, layout: str) -> tuple[str, str]:
    """(rows, cols) of B as staged: N x K in nt and where tf32 nn is transposed, K x N where nn B is padded."""
    return ("K", "N") if layout == "nn" and dtype != "tf32" else ("N", "K")


def config_for(dtype: str, layout: str, shape: tuple[int, int, int]) -> dict:
    config = hs.default_config(GemmProblem(*shape, dtype, layout), export_target("sm_90a"))
    assert config is not None
    return config


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folders = {}
    for name, (dtype, layout, shape, _) in CASES.items():
        tmp = tmp_path_factory.mktemp(name)
        (tmp / "config.json").write_text(json.dumps(config_for(dtype, layout, shape)))
        result = cli(["gemm", "--shapes", "x".join(map(str, shape)), "--dtype", dtype, "--layout", layout, "--arch",
                      "sm_90a", "--config", str(tmp / "config.json"), "--out", str(tmp / "out"), "--json"], tmp)
        assert result.exit_code == 0, result.output
        folders[name] = tmp / "out"
    return folders


@pytest.fixture(scope="module")
def probes(exports, toolchain):
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            dtype = CASES[name][0]
            built[name] = build_probe(exports[name], toolchain, elem_bytes=ELEM[dtype], dtype_code=DTYPE_CODE[dtype])
        return built[name]

    return get


def expected_scratch(name: str, m: int, n: int, k: int) -> tuple[dict[str, tuple[int, int]], int]:
    """({buffer: (byte offset in the workspace, leading dimension)}, workspace bytes): docs/kernel-abi.md, "Staging"."""
    dtype, layout, _, stages = CASES[name]
    e = ELEM[dtype]
    size = {"M": m, "N": n, "K": k}
    out, end = {}, 0
    for stage in stages:
        rows, cols = ("M", "K") if stage == "gemm_stage_a" else b_staged_as(dtype, layout)
        ld = math.ceil(size[cols] / (128 // e)) * (128 // e)
        end = math.ceil(end / 256) * 256
        out[stage[-1].upper() + "_staged"] = (end, ld)
        end += size[rows] * ld * e
    return out, end


def launches(log):
    return [fields(line) for line in log if line.startswith("launch ")]


def tensor_maps(log):
    return [fields(line) for line in log if line.startswith("tensor_map ")]


# ---- what is written ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_a_staged_export_lists_its_stage_kernels_scratch_and_sizes_it_serves(exports, name):
    dtype, layout, shape, stages = CASES[name]
    folder = exports[name]
    doc = read_manifest(folder)
    assert validate(doc) == []
    (launch,) = doc["launch"]
    description = launch["description"]
    assert [s["name"] for s in description["steps"]] == [*stages, "gemm_wgmma"]
    assert [b["name"] for b in description["scratch"]] == [s[-1].upper() + "_staged" for s in stages]
    assert [k["name"] for k in doc["kernels"]] == [*stages, "gemm_wgmma"]
    image = (folder / doc["kernels"][0]["file"]).read_bytes()
    assert {*stages, "gemm_wgmma"} <= function_symbols(image)
    for kernel in doc["kernels"][:-1]:
        assert kernel["block"] == [256, 1, 1] and kernel["dynamic_smem_bytes"] == 0 and kernel["spill_bytes"] == 0
    per_row = 16 // ELEM[dtype]
    # a staged A takes any K; tf32 nn with an aligned tuned K stages only B, so K stays a multiple of 4
    assert launch["valid_for"]["k_multiple"] == (1 if shape[2] % per_row else per_row)
    # C is never staged: a variant built for a ragged N stores it element by element and serves any N
    assert launch["valid_for"]["n_multiple"] == (1 if shape[1] % per_row else per_row)
    assert ("map_c" in description["tensor_maps"]) == (shape[1] % per_row == 0)
    assert description.get("element_aligned", []) == ([] if shape[1] % per_row == 0 else ["C", "bias", "residual"])


def test_an_unstaged_variant_does_not_serve_sizes_that_need_staging(tmp_path):
    # The 4096^3 fp16 default has no stage kernels: K = 4100 would need A staged, so K stays a multiple of 8.
    (tmp_path / "c.json").write_text(json.dumps(config_for("fp16", "nn", (4096, 4096, 4096))))
    result = cli(["gemm", "--m", "4096", "--dtype", "fp16", "--arch", "sm_90a", "--config", str(tmp_path / "c.json"),
                  "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    (launch,) = read_manifest(tmp_path / "out")["launch"]
    assert launch["valid_for"]["k_multiple"] == 8 and "scratch" not in launch["description"]


def test_the_header_documents_the_mnk_workspace_size(exports):
    doc = read_manifest(exports["fp16-nn-k777"])
    text = (exports["fp16-nn-k777"] / doc["files"]["c_header"]).read_text()
    p = doc["prefix"]
    assert f"static inline size_t {p}_workspace_bytes_mnk(int m, int n, int k)" in text
    assert f"static inline size_t {p}_workspace_bytes(int m, int n)" in text and "(this one does)" in text
    assert "TRACEA_GRID_M_DIV, 8u" in text and "TRACEA_GEMM_A_STAGED" in text
    # the staging kernel's own parameters, by slot, and the scratch row placing A_staged in the workspace
    assert ("{TRACEA_GEMM_A, TRACEA_GEMM_A_STAGED, TRACEA_PARAM_INT + TRACEA_GEMM_M, TRACEA_PARAM_INT + TRACEA_GEMM_K, "
            "TRACEA_PARAM_INT + TRACEA_GEMM_LDA, TRACEA_PARAM_INT + TRACEA_GEMM_LDA_STAGED}") in text
    assert "{TRACEA_GEMM_A_STAGED, TRACEA_GEMM_A, TRACEA_GEMM_M, TRACEA_GEMM_K, TRACEA_GEMM_LDA_STAGED, 64u, 2u, 256u}" in text


# ---- the runtime against the fake driver ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, call", [
    ("fp16-nn-k777", (1000, 3000, 777)),
    ("fp16-nn-k777", (1032, 2056, 520)),  # an aligned K: staging A is still correct, only not needed
    ("bf16-nt-k777", (1000, 3000, 777)),
    ("tf32-nn", (1024, 1032, 520)),
    ("tf32-nn", (1024, 1032, 4096)),
    ("fp16-nn-ragged", (4095, 4097, 4091)),
    ("fp16-nn-ragged", (1000, 3000, 776)),  # aligned sizes: staging and element-wise stores are still right
    ("bf16-nt-ragged", (3001, 5003, 2999)),
])
def test_the_stage_kernels_run_first_and_the_maps_read_the_workspace(exports, probes, fake_driver, name, call):
    dtype, layout, _, stages = CASES[name]
    m, n, k = call
    e = ELEM[dtype]
    out, log, buffers = run_probe(probes(name), [str(m), str(n), str(k)] + (["nt"] if layout == "nt" else []),
                                  fake_driver)
    assert out[-1] == "status=0 ok", (out, log)
    scratch, total = expected_scratch(name, m, n, k)
    assert out[0] == f"workspace_bytes={total}"
    workspace = int(buffers["workspace"])
    assert workspace != 0 and workspace % 256 == 0

    ran = launches(log)
    assert [launch["name"] for launch in ran] == [*stages, "gemm_wgmma"]
    doc = read_manifest(exports[name])
    (described,) = doc["launch"]
    placed, needed = backend_plan(doc, described).scratch_layout({"M": m, "N": n, "K": k})  # what the backend places
    assert needed == total and {p.name: (p.offset, p.ld) for p in placed} == scratch
    size = {"M": m, "N": n, "K": k}
    transposed = dtype == "tf32" and layout == "nn"
    for launch, stage in zip(ran, stages):
        buffer = stage[-1].upper() + "_staged"
        offset, ld = scratch[buffer]
        rows, cols = ("M", "K") if buffer == "A_staged" else b_staged_as(dtype, layout)
        if transposed and buffer == "B_staged":
            grid = f"{math.ceil(n / 64)},{math.ceil(k / 64)},1"
        else:
            grid = f"{math.ceil(size[rows] / 8)},{math.ceil(size[cols] / (512 // e))},1"
        source_ld = k if buffer == "A_staged" or layout == "nt" else n
        assert launch["api"] == "plain" and launch["block"] == "256,1,1" and launch["smem"] == "0"
        assert launch["grid"] == grid == backend_grid(doc, described, stage, m, n, k)
        assert launch["src"] == buffers["a" if buffer == "A_staged" else "b"]
        assert int(launch["dst"]) == workspace + offset and int(launch["dst"]) % 256 == 0
        assert [launch[key] for key in ("rows", "cols", "ld_src", "ld_dst")] == [
            str(size[rows]), str(size[cols]), str(source_ld), str(ld)]

    maps = tensor_maps(log)
    a_base, a_stride = ((workspace + scratch["A_staged"][0], scratch["A_staged"][1] * e) if "A_staged" in scratch
                        else (int(buffers["a"]), k * e))
    assert (int(maps[0]["base"]), int(maps[0]["stride"]), maps[0]["dims"]) == (a_base, a_stride, f"{k},{m}")
    if "B_staged" in scratch:  # K-major where staged as N x K; N-major where nn B keeps its shape
        b_base, b_stride = workspace + scratch["B_staged"][0], scratch["B_staged"][1] * e
        b_expected = (b_base, b_stride, f"{n},{k}" if b_staged_as(dtype, layout)[0] == "K" else f"{k},{n}")
    else:
        b_expected = (int(buffers["b"]), n * e, f"{n},{k}")
    assert (int(maps[1]["base"]), int(maps[1]["stride"]), maps[1]["dims"]) == b_expected
    assert int(ran[-1]["c"]) == int(buffers["c"]) and int(ran[-1]["n"]) == n and int(ran[-1]["ldc"]) == n
    if "map_c" in described["description"]["tensor_maps"]:
        assert (maps[2]["base"], maps[2]["dims"]) == (buffers["c"], f"{n},{m}")  # C is never staged
        assert [ran[-1][key] for key in ("map_a", "map_b", "map_c")] == [t["id"] for t in maps]
    else:  # a ragged-N variant: no map over C, the kernel takes C straight after map_b
        assert len(maps) == 2 and ran[-1]["map_c"] == "-1"
        assert [ran[-1][key] for key in ("map_a", "map_b")] == [t["id"] for t in maps]


def test_a_staged_operand_needs_only_element_alignment(probes, fake_driver):
    # "misalign" moves A one element off its 16-byte boundary: A is copied by a staging kernel, so that is fine
    out, log, buffers = run_probe(probes("fp16-nn-k777"), ["1000", "3000", "777", "misalign"], fake_driver)
    assert out[-1] == "status=0 ok", (out, log)
    assert launches(log)[0]["src"] == buffers["a"] and int(buffers["a"]) % 16 == 2


def test_a_staged_launch_without_its_workspace_is_refused(probes, fake_driver):
    out, log, _ = run_probe(probes("tf32-nn"), ["1024", "1024", "1024", "no-workspace"], fake_driver)
    assert out[-1].startswith("status=10 "), (out, log)
    assert not launches(log) and not tensor_maps(log)


# ---- the tables ---------------------------------------------------------------------------------------------------------

SCRATCH = {"name": "A_staged", "source": "A", "transposed": False, "rows": "M", "cols": "K", "ld": "lda_staged",
           "ld_multiple": 64, "elem_bytes": 2, "align_bytes": 256}
SLOTS = c_header.Slots(ABI)


@pytest.mark.parametrize("change, says", [
    # the buffer, its source and its sizes are the op's ABI slots (pointers; ints)
    ({"name": "C_staged"}, "pointer 'C_staged'"), ({"name": "M"}, "pointer 'M'"), ({"source": "D"}, "pointer 'D'"),
    ({"ld": "ldq_staged"}, "size 'ldq_staged'"), ({"rows": "Q"}, "size 'Q'"), ({"cols": "A"}, "size 'A'"),
    ({"ld_multiple": 0}, "scratch"), ({"align_bytes": 8}, "scratch"), ({"elem_bytes": True}, "scratch"),
])
def test_the_header_refuses_scratch_it_cannot_place(change, says):
    with pytest.raises(c_header.UnsupportedLaunch, match=says):
        c_header.scratch_row(Scratch(**{**SCRATCH, **change}), SLOTS)


def test_a_scratch_row_names_the_slots_it_fills():
    row = c_header.scratch_row(Scratch(**SCRATCH), SLOTS)
    assert row.strip() == ("{TRACEA_GEMM_A_STAGED, TRACEA_GEMM_A, TRACEA_GEMM_M, TRACEA_GEMM_K, TRACEA_GEMM_LDA_STAGED, "
                           "64u, 2u, 256u},")


def test_stage_grid_rules_and_params_become_c_rules():
    assert c_header.grid_rule("m/8") == c_header.GridRule("TRACEA_GRID_M_DIV", 8)
    assert c_header.grid_rule("n/64") == c_header.GridRule("TRACEA_GRID_N_DIV", 64)
    assert c_header.grid_rule("k/256") == c_header.GridRule("TRACEA_GRID_K_DIV", 256)
    assert c_header.step_params(["A", "A_staged", "M", "K", "lda", "lda_staged"], SLOTS) == (
        "TRACEA_GEMM_A", "TRACEA_GEMM_A_STAGED", "TRACEA_PARAM_INT + TRACEA_GEMM_M", "TRACEA_PARAM_INT + TRACEA_GEMM_K",
        "TRACEA_PARAM_INT + TRACEA_GEMM_LDA", "TRACEA_PARAM_INT + TRACEA_GEMM_LDA_STAGED")
    with pytest.raises(c_header.UnsupportedLaunch, match="map_a"):  # a staging kernel takes no tensor map
        c_header.step_params(["map_a"], SLOTS)
    with pytest.raises(c_header.UnsupportedLaunch, match="params"):
        c_header.step_params([], SLOTS)


@pytest.mark.parametrize("rule", [1, 7, "tiles", "tiles_m", "tiles_n", "split_k", "mn/256", "m/8", "n/64", "k/256",
                                  "work_clusters", "persistent_clusters",
                                  "k/0", "m/08", "x/8", "mn", "m/", "rows", "m/8/2", 0, -1, True, 2.0, None])
def test_the_export_and_the_backend_know_the_same_grid_rules(rule):
    # c_header.grid_rule turns a rule into the exported runtime's; LaunchPlan.grid_extent computes it for the backends
    # (backends/cuda.py), and check_grid_rule is what a KernelStep accepts.
    def known(read) -> bool:
        try:
            read()
        except (c_header.UnsupportedLaunch, ValueError, TypeError):
            return False
        return True

    plan = LaunchPlan(steps=(), tile_m=128, tile_n=64, split_k=2, cluster_m=2)
    sizes = {"M": 1000, "N": 3000, "K": 777}
    exported = known(lambda: c_header.grid_rule(rule, plan.cluster_m))
    assert exported == known(lambda: plan.grid_extent(check_grid_rule(rule), sizes, resident_clusters=10))
    assert exported == known(lambda: check_grid_rule(rule))


# ---- on an H200 (the lead runs these) --------------------------------------------------------------------------------

GPU_CALLS = {"fp16-nn-k777": ((1000, 3000, 777), (1032, 1032, 520)), "bf16-nt-k777": ((1000, 3000, 777), (600, 520, 201)),
             "tf32-nn": ((1032, 1032, 1024), (1000, 3000, 776), (520, 392, 264)),
             "fp16-nn-ragged": ((4095, 4097, 4091), (1000, 3000, 776), (601, 333, 199)),
             "bf16-nt-ragged": ((3001, 5003, 2999), (600, 520, 201))}
# A shape outside every variant's valid sizes (the ragged exports' variant: M >= 513, N >= 193, K >= 129, from its
# space's rules): the call is refused with the runtime's status, nothing launched (run on an H100, 2026-12-07)
REFUSED_CALLS = {"fp16-nn-ragged": (33, 17, 9)}


@pytest.mark.parametrize("name", CASES)
def test_the_gpu_calls_lie_inside_the_exported_variants_sizes(name):
    """Every call the GPU test makes is one the export's variant is valid for (else the runtime refuses it), and each
    refused call is outside: checked here, without a GPU, so that the GPU test fails only for what needs a GPU."""
    dtype, layout, shape, _ = CASES[name]
    config, target = config_for(dtype, layout, shape), export_target("sm_90a")
    for call in GPU_CALLS[name]:
        assert BACKEND.why_invalid(GemmProblem(*call, dtype, layout), target, config) is None, (name, call)
    if name in REFUSED_CALLS:
        assert BACKEND.why_invalid(GemmProblem(*REFUSED_CALLS[name], dtype, layout), target, config), name


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", CASES)
def test_the_exported_staged_gemm_matches_the_reference_on_an_h200(exports, toolchain, tmp_path, name):
    from test_export_wgmma import _hopper_gpu

    why = _hopper_gpu()
    if why:
        pytest.skip(why)
    folder = exports[name]
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O2", "-ldl", "-lpthread")
    for m, n, k in GPU_CALLS[name]:
        done = subprocess.run([str(program), str(m), str(n), str(k)], capture_output=True, text=True, timeout=600)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (name, m, n, k, done.stdout, done.stderr)
        assert report["nonfinite"] == 0 and report["rel_error"] <= report["bound"] and report["workspace_bytes"] > 0
    if name in REFUSED_CALLS:
        done = subprocess.run([str(program), *map(str, REFUSED_CALLS[name])], capture_output=True, text=True,
                              timeout=60)
        report = json.loads(done.stdout)
        assert done.returncode != 0 and report["ok"] is False, (name, done.stdout, done.stderr)
        assert report["error"] == "no tuned shape of this export is valid for this shape", report
