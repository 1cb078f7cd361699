"""benchmarks/gemm_defaults.py generate: the lists are rebuilt from ops/gemm/defaults; with `keep` (the current file)
the kernel families its lists hold stay as they are, records included, and only the kernel families they lack are
added, `compiled-only`, where the ops module puts them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmark_modules import loaded  # noqa: E402

from tracea_cli.export.defaults import load_defaults  # noqa: E402
from tracea_cli.ops.gemm.defaults import candidates  # noqa: E402

RECORD = {"status": "verified", "device": "a test GPU", "arch": "sm_90", "rel_error": 1e-4, "date": "2026-01-01",
          "how": "a record this test wrote"}


def test_generate_keeps_the_kernel_families_a_file_holds_and_adds_the_ones_it_lacks():
    shipped = load_defaults("gemm")
    current = {**shipped, "defaults": [{**e, "verification": RECORD} for e in shipped["defaults"]
                                       if e["config"]["family"] != "wgmma"]}
    with loaded("gemm_defaults", "gemm_defaults_under_test") as gemm_defaults:
        made = gemm_defaults.generate(compile_entries=False, keep=current, date="2026-12-07")
        fresh = gemm_defaults.generate(compile_entries=False, date="2026-12-07")
        again = gemm_defaults.generate(compile_entries=False, keep=made, date="2026-12-08")
    assert again == made  # nothing left to add
    assert all(e["verification"]["status"] == "compiled-only" for e in fresh["defaults"])
    for dtype in ("fp32", "tf32", "fp16", "bf16", "fp64"):
        for family in ("sm_80", "sm_86/89", "sm_90"):
            mine = [e for e in made["defaults"] if e["dtype"] == dtype and e["family"] == family]
            kept = [e for e in current["defaults"] if e["dtype"] == dtype and e["family"] == family]
            added = [e for e in mine if e["config"]["family"] == "wgmma"]
            assert mine == added + kept, (dtype, family)  # the Hopper family first, the rest untouched
            expected = [c for c in candidates(dtype, "sm_90" if family == "sm_90" else "sm_80") if c["family"] == "wgmma"]
            assert [e["config"] for e in added] == (expected if family == "sm_90" else [])
            assert all(e["verification"]["status"] == "compiled-only" and "not compiled" in e["verification"]["how"]
                       for e in added)


def test_fp32_defaults_run_on_tensor_cores_where_they_outrun_fma_threefold():
    """3xTF32 (the mma family) on sm_80 and sm_90; the SIMT family on sm_86/89, whose tf32 rate is one to two times
    their fp32 rate. The shipped file holds the same."""
    expected = {"sm_80": "mma", "sm_86/89": "simt", "sm_90": "mma"}
    for arch, family in (("sm_80", "mma"), ("sm_86", "simt"), ("sm_89", "simt"), ("sm_90", "mma")):
        assert {c["family"] for c in candidates("fp32", arch)} == {family}, arch
    shipped = [e for e in load_defaults("gemm")["defaults"] if e["dtype"] == "fp32"]
    assert shipped and all(e["config"]["family"] == expected[e["family"]] for e in shipped)
