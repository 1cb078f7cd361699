"""conv2d through the real CLI on the CPU (`python -m tracea_cli` subprocesses with a fresh cache): tune (first run,
cache hit, resume), cache ls/show, bench of one problem and of a suite file naming conv2d problems with the JSON
report, and bad input as one sentence with exit 2 and nothing cached. Small shapes and budgets: compiled kernels are
shared with the rest of the session through TRACEA_KERNEL_CACHE_DIR (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

SHAPE = ("--n", "1", "--h", "13", "--w", "11", "--c", "12", "--k", "20", "--r", "3", "--s", "3", "--pad", "1")


@pytest.fixture(scope="module")
def tracea(tmp_path_factory):
    """Runs `tracea ARGS` with a fresh tuning cache; returns (exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("conv2d-cli")
    env = {**os.environ, "TRACEA_CACHE_DIR": str(root / "cache"), "TRACEA_DATA_DIR": str(root / "data"),
           "NO_COLOR": "1", "COLUMNS": "200"}

    def run(*args: str, timeout: float = 600) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "tracea_cli", *args], env=env, cwd=root, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    run.root = root  # type: ignore[attr-defined]
    return run


@pytest.mark.timeout(900)
def test_tune_conv2d_runs_hits_and_resumes_and_shows_in_the_cache(tracea):
    rc, out, err = tracea("tune", "conv2d", "--help")
    assert rc == 0 and "--stride-h" in out and "--dilation" in out and "default: --pad" in out, out

    args = ("tune", "conv2d", *SHAPE, "--dtype", "fp32", "--epilogue", "bias_relu", "--backend", "cpu", "--json")
    rc, out, err = tracea(*args, "--budget", "2")
    assert rc == 0, err
    first = json.loads(out)
    assert first["cache_hit"] is False and first["evaluations"] == 2 and first["trials_total"] == 2
    assert {"mr", "nr", "vector", "mb", "nb", "cb", "threads"} == set(first["winner"]["config"])
    assert first["winner"]["median_ms"] > 0 and first["winner"]["gflops"] > 0
    assert first["baseline"]["name"].startswith(("torch", "numpy-im2col+epilogue-pass"))
    assert first["baseline"]["median_ms"] > 0

    rc, out, err = tracea(*args, "--budget", "2")
    hit = json.loads(out)
    assert rc == 0 and hit["cache_hit"] is True and hit["evaluations"] == 0
    assert hit["winner"]["config"] == first["winner"]["config"] and hit["key"] == first["key"]

    rc, out, err = tracea(*args, "--budget", "3")
    more = json.loads(out)
    assert rc == 0 and more["cache_hit"] is False and more["evaluations"] == 1 and more["trials_total"] == 3

    rc, out, err = tracea("cache", "ls", "--json")
    assert rc == 0, err
    (listed,) = json.loads(out)["keys"]
    assert listed["op"] == "conv2d" and listed["trials"] == 3
    assert listed["problem"] == {"n": 1, "h": 13, "w": 11, "c": 12, "k": 20, "r": 3, "s": 3, "stride_h": 1,
                                 "stride_w": 1, "pad_h": 1, "pad_w": 1, "dilation_h": 1, "dilation_w": 1,
                                 "epilogue": "bias_relu"}
    rc, out, err = tracea("cache", "show", first["key"], "--json")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["key"]["sizes"] == {"n": 1, "h": 13, "w": 11, "c": 12, "k": 20, "r": 3, "s": 3}
    assert len(shown["trials"]) == 3 and shown["winner"]["status"] == "ok"

    # bench of the tuned problem from the cache (no tuning), the baseline measured in the same run
    rc, out, err = tracea("bench", "conv2d", *SHAPE, "--epilogue", "bias_relu", "--backend", "cpu", "--no-tune",
                          "--json")
    assert rc == 0, err
    rows = {r["provider"]: r for r in json.loads(out)["results"]}
    assert rows["tracea"]["status"] == "ok" and rows["tracea"]["config"] == more["winner"]["config"]
    (base,) = [r for name, r in rows.items() if name != "tracea"]
    assert base["status"] == "ok" and base["rel_error"] <= 1e-5
    if "torch" not in base["provider"]:
        assert base["provider"] == "numpy-im2col+epilogue-pass (torch not installed)"


@pytest.mark.timeout(900)
def test_bench_a_suite_file_naming_conv2d_problems(tracea):
    suite = tracea.root / "conv-suite.json"
    suite.write_text(json.dumps({"name": "conv-rows", "problems": [
        {"op": "conv2d", "h": 9, "w": 7, "c": 3, "k": 17, "r": 3, "stride": 2, "pad": 1, "dilation_w": 2}]}))
    report = tracea.root / "r.json"
    rc, out, err = tracea("bench", "--suite", str(suite), "--backend", "cpu", "--tune-budget", "1",
                          "--report", "json", "--output", str(report))
    assert rc == 0, out + err
    doc = json.loads(report.read_text())
    specs = {p["problem"]: p["spec"] for p in doc["problems"]}
    conv = next(s for s in specs.values() if s["op"] == "conv2d")
    assert (conv["stride_h"], conv["stride_w"], conv["pad_w"], conv["dilation_h"], conv["dilation_w"]) == (2, 2, 1, 1, 2)
    rows = [r for r in doc["results"] if specs[r["problem"]]["op"] == "conv2d"]
    assert len(rows) == 2 and all(r["status"] == "ok" and r["median_ms"] > 0 and r["samples_ms"] for r in rows)
    p, q = (9 + 2 - 2 - 1) // 2 + 1, (7 + 2 - 4 - 1) // 2 + 1
    assert all(r["flops"] == 2 * p * q * 17 * 27 for r in rows)
    assert all(r["bytes"] == 4 * (9 * 7 * 3 + 17 * 27 + p * q * 17) for r in rows)


def test_export_without_a_tuned_winner_says_how_to_get_one(tracea):
    rc, out, err = tracea("export", "conv2d", "--h", "8", "--c", "4", "--k", "4", "--r", "3", "--dtype", "fp16",
                          "--arch", "sm_90", "--out", str(tracea.root / "x"))
    assert rc == 2 and "Traceback" not in out + err, (out, err)
    assert "holds no tuned configuration for conv2d n1 4->4 @8x8 3x3 fp16 on cuda" in err
    assert "--config default" in err and not (tracea.root / "x").exists()


@pytest.mark.parametrize("args, says", [
    (("--h", "2", "--c", "4", "--k", "4", "--r", "5"), "the filter spans 5 rows (r=5, dilation_h=1) but the padded "
                                                       "input has only 2 (h=2, pad_h=0), so the output would be empty."),
    (("--h", "8", "--c", "4", "--k", "4", "--r", "3", "--groups", "2"), "conv2d runs groups=1 only, not groups=2"),
    (("--h", "8", "--c", "4", "--k", "4", "--r", "3", "--dtype", "fp16"), "the cpu backend runs conv2d in fp32, "
                                                                           "fp64, not fp16."),
    (("--h", "8", "--c", "4", "--k", "4", "--r", "3", "--pad-w", "-1"), "pad_w must be a whole number, 0 or more"),
    (("--h", "8", "--c", "4", "--k", "4"), "conv2d needs r (filter height)."),
    (("--h", "8", "--c", "4", "--k", "4", "--r", "3", "--m", "3"), "conv2d has no option --m (--m is an option of gemm, lowrank-mlp)"),
])
def test_bad_input_is_one_sentence_with_exit_2_and_nothing_cached(tracea, args, says):
    before = sorted(p.name for p in (tracea.root / "cache").glob("*")) if (tracea.root / "cache").exists() else []
    rc, out, err = tracea("tune", "conv2d", *args, "--backend", "cpu", "--budget", "1")
    lines = [line for line in (out + err).strip().splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in out + err and lines[0].startswith("error: "), (out, err)
    assert says in lines[0], (says, lines)
    rc, out, err = tracea("cache", "ls", "--json")
    after = json.loads(out)["keys"] if rc == 0 else []
    assert all(k["problem"].get("h") != 2 and k["problem"].get("h") != 8 for k in after), (before, after)
