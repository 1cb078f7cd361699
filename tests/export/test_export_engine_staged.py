"""`tracea export` of an engine configuration with stage = 1 (docs/engine.md, "Staged rows"; docs/kernel-abi.md,
"Staging in the engine families"): fp32 SIMT on odd K and N. The manifest lists the copy kernels and their scratch,
the variant serves any K and N, C moves one element at a time; the C header places the scratch in the caller's
workspace, launches the copies first and points the main kernel at them (checked against the fake driver, no GPU)."""

from __future__ import annotations

import json
import math

import pytest
from export_helpers import (
    backend_grid,
    backend_plan,
    build_probe,
    cli,
    fields,
    needs_nvrtc,
    read_manifest,
    run_probe,
)

from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import validate
from tracea_cli.export.writer import export_target
from tracea_cli.ops.gemm.families.engine_space import hand_picked
from tracea_cli.ops.gemm.problem import GemmProblem

pytestmark = [needs_nvrtc, pytest.mark.timeout(300)]

FP32 = 0  # tracea::DType::fp32 (TRACEA_DTYPE_FP32)
SHAPE = (4095, 4097, 4091)


def staged_config(shape, layout="nn") -> dict:
    config = hand_picked(GemmProblem(*shape, "fp32", layout), export_target("sm_90"))[0]
    assert config["stage"] == 1 and config["vec"] == 4, config
    return dict(config)


def export(tmp_path, shape, config, layout="nn"):
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = cli(["gemm", "--shapes", "x".join(map(str, shape)), "--dtype", "fp32", "--layout", layout, "--arch",
                  "sm_90", "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "out")], tmp_path)
    assert result.exit_code == 0, result.output
    return tmp_path / "out"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return export(tmp_path_factory.mktemp("staged"), SHAPE, staged_config(SHAPE))


@pytest.fixture(scope="module")
def probe(folder, toolchain):
    """probe.cpp built once against the export (each call below runs it)."""
    return build_probe(folder, toolchain, elem_bytes=4, dtype_code=FP32)


def test_the_manifest_lists_the_copies_their_scratch_and_the_sizes_served(folder):
    doc = read_manifest(folder)
    assert validate(doc) == []
    (launch,) = doc["launch"]
    description = launch["description"]
    assert [s["name"] for s in description["steps"]] == ["gemm_stage_a", "gemm_stage_b", "gemm_main"]
    assert [b["name"] for b in description["scratch"]] == ["A_staged", "B_staged"]
    assert description["params"][:2] == ["A_staged", "B_staged"] and description["params"][9:11] == [
        "lda_staged", "ldb_staged"]
    assert description["element_aligned"] == ["C", "bias", "residual"]
    image = (folder / doc["kernels"][0]["file"]).read_bytes()
    assert {"gemm_stage_a", "gemm_stage_b", "gemm_main"} <= function_symbols(image)
    # both operands copied, C element-wise: any K and any N
    assert launch["valid_for"]["k_multiple"] == launch["valid_for"]["n_multiple"] == 1


@pytest.mark.parametrize("shape, copies, multiples", [
    ((4096, 4097, 4096), ["gemm_stage_b"], {"k": 4, "n": 1}),  # K aligned: B alone (odd N) is copied
    ((4096, 4096, 4091), ["gemm_stage_a"], {"k": 1, "n": 4}),  # odd K, N aligned: A alone (B's rows are N long)
])
def test_a_staged_kernel_serves_every_size_whose_copies_it_makes(tmp_path, shape, copies, multiples):
    """Aligned sizes too (the configuration reads as stage 0 there: family.config_in); not a K that would need A
    copied where the kernel copies only B (nor an N that would need B copied where it copies only A)."""
    (launch,) = read_manifest(export(tmp_path, shape, staged_config(shape)))["launch"]
    assert [s["name"] for s in launch["description"]["steps"]] == [*copies, "gemm_main"]
    assert {d: launch["valid_for"][f"{d}_multiple"] for d in "kn"} == multiples
    assert launch["valid_for"]["n_max"] >= 1 << 20 and launch["valid_for"]["k_max"] >= 1 << 20


# the tuned shape, other odd sizes, and aligned ones (copying them is correct, only not needed); M >= 1025: the pick
# groups 8 rows of 128-row tiles
@pytest.mark.parametrize("call", [SHAPE, (1100, 3001, 777), (1100, 1024, 1024)])
def test_the_copies_run_first_into_the_workspace_and_the_main_kernel_reads_them(folder, probe, fake_driver, call):
    m, n, k = call
    out, log, buffers = run_probe(probe, [str(m), str(n), str(k)], fake_driver)
    assert out[-1] == "status=0 ok", (out, log)
    doc = read_manifest(folder)
    (described,) = doc["launch"]
    placed, total = backend_plan(doc, described).scratch_layout({"M": m, "N": n, "K": k})
    assert out[0] == f"workspace_bytes={total}"
    ld = {"A_staged": math.ceil(k / 32) * 32, "B_staged": math.ceil(n / 32) * 32}  # rows padded to 128 bytes
    assert {p.name: p.ld for p in placed} == ld
    workspace = int(buffers["workspace"])
    ran = [fields(line) for line in log if line.startswith("launch ")]
    assert [r["name"] for r in ran] == ["gemm_stage_a", "gemm_stage_b", "gemm_main"]
    for launch, p, source, (rows, cols, ld_src) in zip(ran, placed, ("a", "b"), ((m, k, k), (k, n, n))):
        assert launch["grid"] == f"{rows},{math.ceil(cols / 256)},1" == backend_grid(doc, described, launch["name"],
                                                                                      m, n, k)
        assert launch["src"] == buffers[source] and int(launch["dst"]) == workspace + p.offset
        assert [int(launch[key]) for key in ("rows", "cols", "ld_src", "ld_dst")] == [rows, cols, ld_src, p.ld]
    main = ran[-1]
    assert [int(main[key]) for key in ("a", "b")] == [workspace + p.offset for p in placed]
    assert [int(main[key]) for key in ("lda", "ldb", "ldc", "k")] == [ld["A_staged"], ld["B_staged"], n, k]
    assert main["c"] == buffers["c"]


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_the_exported_staged_gemm_matches_the_reference_on_an_sm90_gpu(folder, toolchain, tmp_path):
    """The export's example, built with the host compiler, on odd and aligned sizes against its float64 check."""
    import subprocess

    from export_helpers import build
    from test_export_wgmma import _hopper_gpu

    why = _hopper_gpu()
    if why:
        pytest.skip(why)
    program = build(toolchain["cxx"], [str(folder / "example.cpp")], tmp_path / "example",
                    [str(folder), toolchain["include"]], "-std=c++17", "-O2", "-ldl", "-lpthread")
    for m, n, k in ((1100, 3001, 777), (1100, 1024, 1024), (2049, 1025, 1023)):
        done = subprocess.run([str(program), str(m), str(n), str(k)], capture_output=True, text=True, timeout=300)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, (m, n, k, done.stdout, done.stderr)
        assert report["nonfinite"] == 0 and report["rel_error"] <= report["bound"] and report["workspace_bytes"] > 0
