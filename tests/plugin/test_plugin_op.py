"""The plug-in proof: an op from tests/ (tracea_test_axpy), registered through the `tracea.ops` entry-point group as
another package would register it, runs through the real CLI — tune (first run, cache hit, resume), cache ls/show,
bench on a suite-file row with the JSON report — and no file under tracea_cli/ names it.

The package and a dist-info folder declaring its entry point go on PYTHONPATH of `python -m tracea_cli`
subprocesses (tuning workers inherit it), exactly as `pip install` of a package with that entry point would do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENTRY_POINTS = "[tracea.ops]\naxpy = tracea_test_axpy:OP\n"


@pytest.fixture(scope="module")
def tracea(tmp_path_factory):
    """Runs `tracea ARGS` with the plug-in installed and a fresh cache; returns (exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("plugin")
    dist = root / "site" / "tracea_test_axpy-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tracea-test-axpy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "site"), str(HERE / "axpy_op"),
                                                        os.environ.get("PYTHONPATH", "")]),
           "TRACEA_CACHE_DIR": str(root / "cache"), "TRACEA_DATA_DIR": str(root / "data"),
           "TRACEA_KERNEL_CACHE_DIR": str(root / "kernels"), "NO_COLOR": "1", "COLUMNS": "200"}

    def run(*args: str, timeout: float = 600) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "tracea_cli", *args], env=env, cwd=root, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    run.root = root  # type: ignore[attr-defined]
    return run


def _no_traceback(*texts: str) -> bool:
    return not any("Traceback" in t for t in texts)


@pytest.mark.timeout(900)
def test_a_plugin_op_tunes_hits_resumes_and_shows_in_the_cache(tracea):
    rc, out, err = tracea("tune", "--help")
    assert rc == 0 and "axpy" in out, out + err

    args = ("tune", "axpy", "--n", "200000", "--alpha", "0.5", "--backend", "cpu", "--json")
    rc, out, err = tracea(*args, "--budget", "3")
    assert rc == 0, err
    first = json.loads(out)
    assert first["cache_hit"] is False and first["evaluations"] == 3 and first["trials_total"] == 3
    assert first["winner"]["config"]["chunk"] in (1024, 8192, 65536) and first["winner"]["median_ms"] > 0
    assert first["baseline"]["name"] == "numpy" and first["baseline"]["median_ms"] > 0

    rc, out, err = tracea(*args, "--budget", "3")
    hit = json.loads(out)
    assert rc == 0 and hit["cache_hit"] is True and hit["evaluations"] == 0
    assert hit["winner"]["config"] == first["winner"]["config"] and hit["key"] == first["key"]

    rc, out, err = tracea(*args, "--budget", "5")
    more = json.loads(out)
    assert rc == 0 and more["cache_hit"] is False and more["evaluations"] == 2 and more["trials_total"] == 5

    rc, out, err = tracea("cache", "ls", "--json")
    assert rc == 0, err
    (listed,) = json.loads(out)["keys"]
    assert listed["op"] == "axpy" and listed["problem"] == {"alpha": 0.5, "n": 200000} and listed["trials"] == 5

    rc, out, err = tracea("cache", "show", first["key"], "--json")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["key"]["op"] == "axpy" and shown["key"]["sizes"] == {"n": 200000}
    assert len(shown["trials"]) == 5 and shown["winner"]["status"] == "ok"

    rc, out, err = tracea("cache", "show", first["key"])
    assert rc == 0 and "axpy" in out and _no_traceback(out, err)


@pytest.mark.timeout(900)
def test_a_plugin_op_benches_from_a_suite_file_with_the_json_report(tracea):
    suite = tracea.root / "axpy-suite.json"
    suite.write_text(json.dumps({"name": "axpy-rows", "problems": [{"op": "axpy", "n": 300000, "dtype": ["fp32", "fp64"]}]}))
    report = tracea.root / "r.json"
    rc, out, err = tracea("bench", "--suite", str(suite), "--backend", "cpu", "--tune-budget", "2",
                          "--report", "json", "--output", str(report))
    assert rc == 0, out + err
    doc = json.loads(report.read_text())
    specs = {p["problem"]: p["spec"] for p in doc["problems"]}
    assert {s["op"] for s in specs.values()} == {"axpy"} and {s["dtype"] for s in specs.values()} == {"fp32", "fp64"}
    assert all(s["n"] == 300000 and s["alpha"] == 2.0 for s in specs.values())
    rows = doc["results"]
    assert {r["provider"] for r in rows} == {"tracea", "numpy"} and len(rows) == 4
    for r in rows:
        assert r["status"] == "ok" and r["median_ms"] > 0 and r["n"] >= 1 and r["samples_ms"]
        itemsize = 4 if specs[r["problem"]]["dtype"] == "fp32" else 8
        assert r["flops"] == 2 * 300000 and r["bytes"] == 3 * 300000 * itemsize


def test_plugin_bad_input_is_one_sentence(tracea):
    for args, says in ((("tune", "axpy", "--n", "0", "--backend", "cpu"), "n must be a positive whole number"),
                       (("tune", "axpy", "--n", "64", "--m", "3", "--backend", "cpu"), "--m"),
                       (("tune", "axpy", "--n", "64", "--dtype", "bf16", "--backend", "cpu"), "unknown dtype 'bf16'"),
                       (("export", "axpy", "--n", "64", "--arch", "sm_90", "--out", "x"), "axpy")):
        rc, out, err = tracea(*args)
        lines = [line for line in (out + err).strip().splitlines() if line.strip()]
        assert rc == 2 and _no_traceback(out, err) and lines[0].startswith("error: "), (args, out, err)
        assert says in out + err, (args, out, err)


def test_nothing_under_tracea_cli_names_the_plugin_op():
    named = [p for p in (ROOT / "tracea_cli").rglob("*") if p.is_file() and p.suffix in (".py", ".h", ".cpp", ".cu")
             and ("axpy" in p.read_text(errors="replace").lower())]
    assert not named, named
