"""Every report renders from the same results: HTML (valid, offline, charts = JSON), CSV, Markdown, terminal."""

import csv
import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from bench_fakes import FakeEngine  # noqa: E402
from report_checks import assert_charts_match_json, assert_self_contained, parse_report  # noqa: E402

from tracea_cli.bench import results as res  # noqa: E402
from tracea_cli.bench.compare import compare_results  # noqa: E402
from tracea_cli.report import units  # noqa: E402
from tracea_cli.bench.runner import BenchRequest, run_bench  # noqa: E402
from tracea_cli.bench.suites import Suite  # noqa: E402
from tracea_cli.errors import UsageError  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.report import check_formats, render  # noqa: E402
from tracea_cli.report.csv_report import COLUMNS  # noqa: E402
from tracea_cli.report.terminal import render_terminal  # noqa: E402

PROBLEMS = (GemmProblem(128, 128, 128), GemmProblem(256, 192, 160, layout="nt"), GemmProblem(96, 96, 96, dtype="fp64"),
            GemmProblem(64, 64, 64, dtype="bf16"), GemmProblem(200, 200, 200))


@pytest.fixture(scope="module")
def results():
    engine = FakeEngine(throttled=2, wrong={PROBLEMS[4].label})
    out = run_bench(BenchRequest(suite=Suite("test", PROBLEMS), command="tracea bench --suite test.json"), engine, created="2026-11-29T00:00:00+00:00")
    return out.with_comparison(compare_results(out, out, against="old.json"))


def test_html_is_valid_offline_and_its_charts_carry_the_json_values(results):
    html = render("html", results)
    parsed = parse_report(html)
    assert_self_contained(html, parsed)
    doc = json.loads(render("json", results))
    assert_charts_match_json(parsed, doc)
    ids = [a["id"] for _, a in parsed.tags if "id" in a]
    assert len(ids) == len(set(ids)), "element ids must be unique across the charts"
    sections = [a["id"] for t, a in parsed.tags if t == "section"]
    # results first, the long environment table last
    assert sections == ["summary", "results", "speedup", "roofline", "convergence", "comparison", "failures", "environment"]
    text = " ".join(parsed.text)
    assert "--report json  to keep the raw samples" in text
    assert "the raw samples are in the JSON report run.json" in " ".join(parse_report(render("html", results, json_file="run.json")).text)
    for needle in ("Test CPU", "tracea bench --suite test.json", "wrong_result", "skipped", "throttled 2/30 samples", "block=64 order=ikj"):
        assert needle in text, needle


def test_html_without_baseline_or_tuning_still_renders():
    problem = GemmProblem(64, 64, 64)
    no_baseline = run_bench(BenchRequest(suite=Suite("t", (problem,)), baseline="none"), FakeEngine(), created="2026-11-29T00:00:00+00:00")
    html = render("html", no_baseline)
    parsed = parse_report(html)
    assert_self_contained(html, parsed)
    assert "speedup" not in parsed.chart_data and "roofline" in parsed.chart_data and "convergence-0" in parsed.chart_data
    assert "No speed-up to show" in html
    nothing = run_bench(BenchRequest(suite=Suite("t", (problem,)), baseline="none", tune=False), FakeEngine(cached=False),
                        created="2026-11-29T00:00:00+00:00")
    html = render("html", nothing)
    parsed = parse_report(html)
    assert_self_contained(html, parsed)
    assert parsed.chart_data == {}
    assert "No measurement to place on a roofline" in html and "No tuning trials" in html and "--no-tune" in html


def test_csv_has_one_row_per_problem_and_provider(results):
    rows = list(csv.DictReader(io.StringIO(render("csv", results))))
    assert len(rows) == len(results.results)
    assert tuple(rows[0]) == COLUMNS
    for row, r in zip(rows, results.results):
        assert (row["problem"], row["provider"], row["status"]) == (r.problem, r.provider, r.status)
        if r.ok:
            assert float(row["median_ms"]) == r.median_ms and int(row["n_samples"]) == r.n
        else:
            assert row["median_ms"] == "" and row["reason"] == r.reason
    nt = next(row for row in rows if row["layout"] == "nt")
    assert (nt["m"], nt["n"], nt["k"]) == ("256", "192", "160")


def test_markdown_report(results):
    md = render("md", results)
    assert md.startswith("# tracea bench: test on Test CPU")
    table = [line for line in md.splitlines() if line.startswith("| gemm")]
    assert len(table) >= len(results.results)  # the results, then the comparison and failure tables
    assert "## Compared with old.json" in md and "## Failures" in md and "`block=64 order=ikj`" in md


@pytest.mark.parametrize("width", [80, 160])
def test_terminal_report_at_fixed_width(results, width):
    from rich.console import Console

    console = Console(width=width, record=True, color_system=None)
    render_terminal(results, console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert lines[0].startswith("tracea bench · suite test · Test CPU (cpu)")
    tuned = results.tuned("gemm 256x192x160 fp32 nt")
    i = lines.index("gemm 256x192x160 fp32 nt")
    row = lines[i + 1].split()
    assert row[0] == "tracea" and row[1] == f"{tuned.median_ms:.4f}*"  # * : throttled samples
    assert f"{tuned.speedup.estimate:.2f}×" in lines[i + 1] and lines[i + 2].split()[0] == "numpy"
    assert "speed-up over numpy: geometric mean" in text and "overlapped clock throttling" in text
    assert "compared with old.json" in text and "not significant" in text
    assert "wrong_result" in text and "skipped" in text


def test_report_formats_are_checked():
    assert check_formats(["html", "md", "markdown", "json"]) == ("html", "md", "json")
    with pytest.raises(UsageError) as e:
        check_formats(["pdf"])
    assert "unknown report format 'pdf'" in e.value.message


def test_a_busy_machine_is_reported():
    from rich.console import Console

    quiet = run_bench(BenchRequest(suite=Suite("t", PROBLEMS[:1])), FakeEngine(busy_load=1.5), created="2026-11-29T00:00:00+00:00")
    busy = run_bench(BenchRequest(suite=Suite("t", PROBLEMS[:1])), FakeEngine(busy_load=7.0), created="2026-11-29T00:00:00+00:00")
    assert (quiet.environment.load.start, quiet.environment.load.end) == (0.5, 1.5) and not quiet.environment.busy
    assert busy.environment.load.end == 7.0 and busy.environment.busy
    assert res.from_dict(res.to_dict(busy)).environment.load == busy.environment.load
    competed = run_bench(BenchRequest(suite=Suite("t", PROBLEMS[:1])), FakeEngine(others_threads=1.5),
                         created="2026-11-29T00:00:00+00:00")
    assert competed.environment.busy and "other processes kept 1.5 of them busy" in units.load_text(competed.environment)
    assert res.from_dict(res.to_dict(competed)).environment.load == competed.environment.load
    for fmt in ("html", "md"):
        assert "The machine was busy" in render(fmt, busy) and "The machine was busy" not in render(fmt, quiet)
    console = Console(width=100, record=True, color_system=None)
    render_terminal(busy, console)
    assert "warning: The machine was busy" in console.export_text()
