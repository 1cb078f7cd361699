"""`tracea bench` through typer's test runner: bad input exits 2 with one sentence; --from and --compare decide exit codes."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from bench_fakes import FakeEngine, samples  # noqa: E402
from report_checks import assert_self_contained, parse_report  # noqa: E402

from tracea_cli.bench import results as res  # noqa: E402
from tracea_cli.bench.runner import BenchRequest, run_bench  # noqa: E402
from tracea_cli.bench.suites import builtin_suite  # noqa: E402
from tracea_cli.cli import app  # noqa: E402


@pytest.fixture
def run(tmp_path):
    env = {"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "200", "NO_COLOR": "1"}

    def invoke(*args: str):
        result = CliRunner().invoke(app, ["bench", *args], env=env)
        assert "Traceback" not in result.output, result.output
        return result

    return invoke


def _results(factor: float = 1.0, seed: int = 0) -> res.BenchResults:
    out = run_bench(BenchRequest(suite=builtin_suite("quick", backend="cpu", dtypes=("fp32",)), command="tracea bench --suite quick"), FakeEngine(),
                    created="2026-11-29T00:00:00+00:00")
    probs = {p.problem: p for p in out.problems}
    rows = tuple(res.make_row(problem=probs[r.problem], provider=r.provider, kind=r.kind, config=r.config,
                              samples_ms=samples(r.median_ms * factor, seed=seed + i).times_ms) for i, r in enumerate(out.results))
    return replace(out, results=rows)


@pytest.fixture
def saved(tmp_path):
    def save(name: str, results: res.BenchResults) -> Path:
        path = tmp_path / name
        path.write_text(res.to_json(results))
        return path

    return save


def _one_sentence_usage_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and lines[0].endswith("."), lines
    assert len(lines) <= 2 and all(not line.startswith("  ") or line.startswith("  hint:") for line in lines)
    for n in needles:
        assert n in result.output, (n, result.output)


@pytest.mark.parametrize("args, needles", [
    (["--suite", "fastest"], ["unknown suite 'fastest'"]),
    (["--suite", "missing/suite.json"], ["suite file missing/suite.json does not exist"]),
    (["--report", "pdf"], ["unknown report format 'pdf'"]),
    (["--baseline", "cudnn"], ["gemm has no baseline 'cudnn'"]),
    (["--baseline", "mkl"], ["gemm has no baseline 'mkl'"]),
    (["--tune-budget", "0"], ["--tune-budget must be at least 1"]),
    (["--report", "html", "--report", "json", "--output", "x.html"], ["--output takes one file report"]),
    (["gemm"], ["gemm needs m"]),
    (["--m", "64"], ["put it after the op's name"]),
    (["gemm", "--m", "-3"], ["m must be a positive whole number"]),
    (["conv9d", "--m", "3"], ["unknown operation 'conv9d'"]),
])
def test_bad_input_exits_2_with_one_sentence(run, args, needles):
    _one_sentence_usage_error(run(*args), *needles)


def test_unreadable_compare_and_from_files(run, tmp_path):
    missing = tmp_path / "nope.json"
    _one_sentence_usage_error(run("--from", str(missing)), "--from file", "does not exist")
    _one_sentence_usage_error(run("--suite", "quick", "--compare", str(missing)), "--compare file", "does not exist")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{]")
    _one_sentence_usage_error(run("--from", str(garbage)), "not valid JSON")
    _one_sentence_usage_error(run("--from", str(tmp_path)), "is a folder")


def test_unwritable_output(run, tmp_path, saved):
    results = saved("r.json", _results())
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _one_sentence_usage_error(run("--from", str(results), "--report", "html", "--output", str(blocker / "r.html")), "cannot create the folder")
    _one_sentence_usage_error(run("--from", str(results), "--report", "md", "--output-dir", str(blocker)), "is a file, not a folder")
    _one_sentence_usage_error(run("--from", str(results), "--suite", "quick"), "--from renders earlier results")


def test_from_renders_every_report_without_running(run, tmp_path, saved):
    results = saved("r.json", _results())
    out_dir = tmp_path / "reports"
    r = run("--from", str(results), "--report", "terminal", "--report", "html", "--report", "csv", "--report", "md", "--report", "json",
            "--output-dir", str(out_dir))
    assert r.exit_code == 0, r.output
    assert "tracea bench · suite quick · Test CPU" in r.stdout
    written = sorted(p.suffix for p in out_dir.iterdir())
    assert written == [".csv", ".html", ".json", ".md"]
    for p in out_dir.iterdir():
        assert f"{p.suffix[1:]} report: {p}" in r.stdout
    html = next(out_dir.glob("*.html")).read_text()
    assert_self_contained(html, parse_report(html))
    assert json.loads(next(out_dir.glob("*.json")).read_text()) == json.loads(results.read_text())


def test_default_output_path_is_under_the_data_folder(run, tmp_path, saved):
    results = saved("r.json", _results())
    r = run("--from", str(results), "--report", "html")
    assert r.exit_code == 0, r.output
    written = list((tmp_path / "data" / "reports").glob("bench-*.html"))
    assert len(written) == 1 and f"html report: {written[0]}" in r.stdout


def test_output_format_follows_the_file_name(run, tmp_path, saved):
    results = saved("r.json", _results())
    r = run("--from", str(results), "--output", str(tmp_path / "out.md"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out.md").read_text().startswith("# tracea bench")


def test_json_prints_only_the_results(run, saved):
    results = saved("r.json", _results())
    r = run("--from", str(results), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(results.read_text())


def test_compare_exits_1_on_a_regression_and_0_on_noise(run, tmp_path, saved):
    old = saved("old.json", _results(seed=0))
    noisy = saved("noisy.json", _results(factor=1.0, seed=50))
    slower = saved("slower.json", _results(factor=1.3, seed=90))
    same = run("--from", str(noisy), "--compare", str(old))
    assert same.exit_code == 0, same.output
    assert "not significant" in same.stdout and "REGRESSION" not in same.stdout
    worse = run("--from", str(slower), "--compare", str(old), "--report", "terminal", "--report", "json", "--output-dir", str(tmp_path / "o"))
    assert worse.exit_code == 1, worse.output
    assert "REGRESSION" in worse.stdout and "significant regression(s) against" in worse.output
    doc = json.loads(next((tmp_path / "o").glob("*.json")).read_text())  # reports are written before the exit
    assert doc["comparison"]["regressions"] == len(doc["results"])


def test_the_recorded_command_is_the_one_typed(monkeypatch):
    from tracea_cli.cli.bench import _command_line
    from tracea_cli.ops.registry import get_op

    none = {"m": None, "n": None, "k": None, "dtype": "fp32", "layout": "nn", "suite": None, "baseline": "auto",
            "no_tune": False, "tune_budget": None, "backend": "auto", "device": None, "from_file": None, "compare": None}
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/tracea", "bench", "--report", "html"])
    assert _command_line(None, none, ("html",)) == "tracea bench --report html"
    monkeypatch.setattr(sys, "argv", ["pytest", "tests"])  # not run as tracea: the options, as a user would type them
    assert _command_line(None, none, ("html",)) == "tracea bench --report html"
    one = {**none, "m": 4096, "epilogue": "none", "dtype": "bf16", "layout": "nt", "baseline": "torch", "no_tune": True, "backend": "cuda",
           "device": "1", "compare": Path("old.json")}
    assert _command_line(get_op("gemm"), one, ("terminal",)) == ("tracea bench gemm --m 4096 --dtype bf16 --layout nt --baseline torch --no-tune "
                                                 "--backend cuda --device 1 --compare old.json")


def test_a_rate_above_the_measured_ceiling_is_flagged():
    from tracea_cli.report import units

    row = _results().results[0]
    assert not units.above_ceiling(row)
    high = replace(row, pct_of_ceiling=180.0)
    assert units.above_ceiling(high) and "above the ceiling" in units.notes(high)


def test_reports_say_why_the_ceiling_column_is_empty():
    from tracea_cli.report import units
    from tracea_cli.report.html import render_html
    from tracea_cli.report.markdown import render_markdown

    results = _results()
    without = replace(results, problems=tuple(replace(p, ceiling=res.Ceiling()) for p in results.problems))
    assert units.no_ceilings(without)
    assert units.NO_CEILINGS_NOTE in render_markdown(without) and "tracea doctor" in render_html(without)
    measured = replace(results, problems=tuple(replace(p, ceiling=res.Ceiling(flops_per_s=1e12, flops_source="measured"))
                                               for p in results.problems))
    assert not units.no_ceilings(measured) and units.NO_CEILINGS_NOTE not in render_markdown(measured)
