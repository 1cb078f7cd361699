"""The terminal view at a fixed width: marks, fixes, the ceilings table with datasheet percentages."""

from __future__ import annotations

import io

from rich.console import Console

from doctor_fakes import facts, scenario
from tracea_cli.doctor.checks import CHECKS, run_checks
from tracea_cli.doctor.profile import Measurement, NotMeasured
from tracea_cli.doctor.render import format_value, render_check_list, render_profile
from tracea_cli.doctor.run import make_profile


def rendered(fn, *args) -> str:
    buf = io.StringIO()
    fn(Console(file=buf, width=120, no_color=True, highlight=False), *args)
    return buf.getvalue()


def test_profile_view():
    f = facts(scenario("ecc-errors"))
    m = Measurement(device="cuda:0", metric="memory_bandwidth", unit="B/s", median=4.12e12, cv=0.004, n=20, q1=4.1e12,
                    q3=4.13e12, created="2026-11-29T00:00:00+00:00")
    p = make_profile(f, run_checks(f), [m], [NotMeasured("cuda:0", "gemm_flops", "no library does it here", "fp8")],
                     previous=None, kind="full")
    text = rendered(render_profile, p)
    assert "cuda:0 NVIDIA H200 · sm_90 · 132 SMs · 140.4 GiB" in text
    assert "datasheet: NVIDIA H200 SXM" in text
    assert " ✗ ecc-errors cuda:0" in text and "fix: Stop work on this GPU and reset it (sudo nvidia-smi -r -i 0)" in text
    assert " ✓ nvml" in text and " – numba-threading" in text and "skipped: runs in the full doctor only" in text
    assert "1 failed" in text
    row = next(line for line in text.splitlines() if line.startswith("cuda:0") and "memory bandwidth" in line)
    assert "4.12 TB/s" in row and "0.4%" in row and "4.80 TB/s" in row and "86%" in row
    assert "cuda:0 gemm_flops fp8: not measured: no library does it here" in text


def test_markup_in_hints_is_shown_literally():
    p = make_profile(facts(), run_checks(facts()), [], [], previous=None, kind="quick")
    text = rendered(render_profile, p)
    assert "pip install 'tracea[cuda]'" in text
    assert "No measurements yet" in text


def test_check_list_and_units():
    text = rendered(render_check_list, CHECKS)
    assert all(c.id in text for c in CHECKS)
    assert format_value(4.12e12, "B/s") == "4.12 TB/s"
    assert format_value(7.31e14, "FLOP/s") == "731 TFLOP/s"
    assert format_value(2.1e11, "FLOP/s") == "210 GFLOP/s"
    assert format_value(5.25, "us") == "5.25 µs"
