"""`tracea bench --suite quick --report html` for real on the CPU backend: tuned (small budget), measured, reported.

The HTML must parse, name no external resource, and plot exactly the values of the JSON report of the same run;
a second run hits the cache and `--compare`s against the first.
"""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from report_checks import assert_charts_match_json, assert_self_contained, parse_report  # noqa: E402

from tracea_cli.cli import app  # noqa: E402


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-cpu")
    return {"TRACEA_CACHE_DIR": str(root / "cache"), "TRACEA_DATA_DIR": str(root / "data"), "COLUMNS": "200", "NO_COLOR": "1",
            "NUMBA_NUM_THREADS": "2"}, root


@pytest.fixture(scope="module")
def first_run(env):
    variables, root = env
    out = root / "reports"
    result = CliRunner().invoke(app, ["bench", "--suite", "quick", "--backend", "cpu", "--tune-budget", "1", "--report", "html",
                                      "--report", "json", "--report", "terminal", "--output-dir", str(out)], env=variables)
    return result, out


@pytest.mark.timeout(300)
def test_quick_suite_html_report_on_the_cpu(first_run):
    result, out = first_run
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    html_path = next(out.glob("*.html"))
    json_path = next(out.glob("*.json"))
    assert f"html report: {html_path}" in result.stdout and f"json report: {json_path}" in result.stdout
    doc = json.loads(json_path.read_text())
    assert [(r["problem"], r["provider"], r["status"]) for r in doc["results"]] == [
        ("gemm 128x128x128 fp32 nn", "tracea", "ok"), ("gemm 128x128x128 fp32 nn", "numpy", "ok"),
        ("gemm 256x256x256 fp32 nn", "tracea", "ok"), ("gemm 256x256x256 fp32 nn", "numpy", "ok"),
    ]
    for r in doc["results"]:
        assert r["n"] >= 15 and len(r["samples_ms"]) == r["n"] and r["median_ms"] > 0 and r["rel_error"] < 1e-5
        assert r["flops_per_s"] > 0
    for p in doc["problems"]:
        assert p["tuning"]["evaluations"] >= 1 and p["tuning"]["trials"]
    tuned = [r for r in doc["results"] if r["provider"] == "tracea"]
    assert all(r["speedup"]["low"] <= r["speedup"]["estimate"] <= r["speedup"]["high"] and r["speedup_over"] == "numpy" for r in tuned)
    html = html_path.read_text()
    parsed = parse_report(html)
    assert_self_contained(html, parsed)
    assert_charts_match_json(parsed, doc)
    assert "gemm 256x256x256 fp32 nn" in result.stdout  # the terminal table


@pytest.mark.timeout(300)
def test_second_run_uses_the_cache_and_compares(first_run, env):
    result, out = first_run
    assert result.exit_code == 0, result.output
    variables, root = env
    old = next(out.glob("*.json"))
    again = CliRunner().invoke(app, ["bench", "--suite", "quick", "--backend", "cpu", "--no-tune", "--compare", str(old), "--json"], env=variables)
    assert again.exit_code in (0, 1), again.output  # 1 only if the machine really got slower between the runs
    doc = json.loads(again.stdout)
    assert all(p["tuning"]["cache_hit"] and p["tuning"]["evaluations"] == 0 for p in doc["problems"])
    first = json.loads(old.read_text())
    assert [r["config"] for r in doc["results"]] == [r["config"] for r in first["results"]]
    assert len(doc["comparison"]["changes"]) == 4
    assert (again.exit_code == 1) == (doc["comparison"]["regressions"] > 0)
