"""lowrank-mlp through the real CLI on the CPU (`python -m tracea_cli` subprocesses with a fresh cache): tune (first
run, cache hit) with the JSON result the gemm op gives, bench of one problem, and bad input as one sentence with
exit 2 and nothing cached. Small shapes and budgets: compiled kernels are shared with the rest of the session through
TRACEA_KERNEL_CACHE_DIR (tests/conftest.py), the kernel tests compile the specs the tuner suggests first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

SHAPE = ("--m", "70", "--d-in", "50", "--rank", "12", "--d-out", "33")


@pytest.fixture(scope="module")
def tracea(tmp_path_factory):
    """Runs `tracea ARGS` with a fresh tuning cache; returns (exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("lowrank-cli")
    env = {**os.environ, "TRACEA_CACHE_DIR": str(root / "cache"), "TRACEA_DATA_DIR": str(root / "data"),
           "NO_COLOR": "1", "COLUMNS": "200"}

    def run(*args: str, timeout: float = 600) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "tracea_cli", *args], env=env, cwd=root, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    run.root = root  # type: ignore[attr-defined]
    return run


@pytest.mark.timeout(900)
def test_tune_lowrank_runs_hits_and_benches(tracea):
    rc, out, err = tracea("tune", "lowrank-mlp", "--help")
    assert rc == 0 and "--no-bias" in out and "--residual" in out and "--intermediate" in out, out

    args = ("tune", "lowrank-mlp", *SHAPE, "--act", "silu", "--residual", "--dtype", "fp32", "--backend", "cpu",
            "--json")
    rc, out, err = tracea(*args, "--budget", "1")  # the first suggestion: the kernel tests' spec (compiled already)
    assert rc == 0, err
    first = json.loads(out)
    assert {"cache_hit", "evaluations", "key", "trials_total", "winner", "baseline", "failures"} <= set(first)
    assert first["cache_hit"] is False and first["evaluations"] == 1 and first["trials_total"] == 1
    assert set(first["winner"]["config"]) == {"mr", "nr", "vector", "mb", "kc", "threads"} and first["failures"] == []
    assert first["winner"]["median_ms"] > 0 and first["winner"]["cv"] >= 0
    assert first["baseline"]["name"].startswith(("torch-unfused", "numpy-unfused"))
    assert first["baseline"]["median_ms"] > 0
    assert first["problem"]["residual"] is True and first["problem"]["bias"] is True

    rc, out, err = tracea(*args, "--budget", "1")
    hit = json.loads(out)
    assert rc == 0 and hit["cache_hit"] is True and hit["evaluations"] == 0 and hit["key"] == first["key"]

    rc, out, err = tracea("bench", "lowrank-mlp", *SHAPE, "--act", "silu", "--residual", "--backend", "cpu",
                          "--no-tune", "--json")
    assert rc == 0, err
    rows = {r["provider"]: r for r in json.loads(out)["results"]}
    assert rows["tracea"]["status"] == "ok" and rows["tracea"]["config"] == first["winner"]["config"]
    (base,) = [r for name, r in rows.items() if name != "tracea"]
    assert base["status"] == "ok" and base["rel_error"] <= 1e-5
    assert rows["tracea"]["flops"] == 2 * 70 * 12 * (50 + 33)


@pytest.mark.parametrize("args, says", [
    (("--m", "256", "--d-in", "128", "--rank", "0"), "error: rank must be a positive whole number, got 0."),
    (("--m", "256", "--d-in", "128", "--rank", "200"), "error: rank 200 is larger than d_in=128: a low-rank layer "
                                                       "needs rank <= min(d_in, d_out) = 128."),
    (("--m", "256", "--d-in", "128", "--rank", "16", "--d-out", "8"), "error: rank 16 is larger than d_out=8"),
    (("--m", "0", "--d-in", "128", "--rank", "16"), "error: m must be a positive whole number, got 0."),
    (("--m", "256", "--d-in", "128", "--rank", "16", "--dtype", "fp16"), "the cpu backend runs lowrank-mlp in fp32, "
                                                                          "fp64, not fp16."),
    (("--m", "256", "--rank", "16"), "error: lowrank-mlp needs d_in (columns of x (input features))."),
    (("--m", "256", "--d-in", "128", "--rank", "16", "--k", "3"), "lowrank-mlp has no option --k"),
])
def test_bad_input_is_one_sentence_with_exit_2_and_nothing_cached(tracea, args, says):
    rc, out, err = tracea("tune", "lowrank-mlp", *args, "--backend", "cpu", "--budget", "4")
    lines = [line for line in (out + err).strip().splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in out + err and lines[0].startswith("error: "), (out, err)
    assert says in lines[0], (says, lines)
    rc, out, err = tracea("cache", "ls", "--json")
    keys = json.loads(out)["keys"] if rc == 0 else []
    assert all(k["problem"].get("m") != 256 and k["problem"].get("m") != 0 for k in keys), keys
