"""attention through the real CLI on the CPU (`python -m tracea_cli` subprocesses with a fresh cache): the issue's
command line parses (the problem is made; this machine then has no CUDA device for bf16), tune of a small problem
end to end (first run, cache hit) with its baseline, and bad input as one sentence with exit 2 and nothing cached.
The compiled CPU kernel is shared with the kernel tests through TRACEA_KERNEL_CACHE_DIR (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

SHAPE = ("--batch", "1", "--heads", "4", "--kv-heads", "2", "--seq", "33", "--seq-k", "40", "--head-dim", "64")


@pytest.fixture(scope="module")
def tracea(tmp_path_factory):
    """Runs `tracea ARGS` with a fresh tuning cache; returns (exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("attention-cli")
    env = {**os.environ, "TRACEA_CACHE_DIR": str(root / "cache"), "TRACEA_DATA_DIR": str(root / "data"),
           "NO_COLOR": "1", "COLUMNS": "200", "CUDA_VISIBLE_DEVICES": ""}

    def run(*args: str, timeout: float = 600) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "tracea_cli", *args], env=env, cwd=root, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    return run


def test_the_issue_command_line_parses(tracea):
    rc, out, err = tracea("tune", "attention", "--help")
    assert rc == 0 and all(f in out for f in ("--kv-heads", "--seq-k", "--head-dim", "--causal", "--lse", "--layout"))
    rc, out, err = tracea("tune", "attention", "--batch", "4", "--heads", "16", "--seq", "4096", "--head-dim", "128",
                          "--dtype", "bf16", "--causal", "--kv-heads", "4", "--seq-k", "8192", "--backend", "cpu")
    # the problem was made (all options known and valid); the cpu backend then refuses bf16
    assert rc == 2 and "the cpu backend runs attention in fp32, fp64, not bf16" in err, (out, err)


@pytest.mark.timeout(600)
def test_tune_attention_on_the_cpu_runs_and_hits(tracea):
    args = ("tune", "attention", *SHAPE, "--causal", "--lse", "--dtype", "fp32", "--backend", "cpu", "--json")
    rc, out, err = tracea(*args, "--budget", "1")
    assert rc == 0, err
    first = json.loads(out)
    assert first["cache_hit"] is False and first["evaluations"] == 1 and first["failures"] == []
    assert set(first["winner"]["config"]) == {"bm", "bn", "threads"} and first["winner"]["median_ms"] > 0
    assert first["baseline"]["name"].startswith(("torch-sdpa (default ran", "numpy-blocked"))
    assert first["baseline"]["median_ms"] > 0
    assert first["problem"]["causal"] is True and first["problem"]["kv_heads"] == 2 and first["problem"]["lse"]

    rc, out, err = tracea(*args, "--budget", "1")
    hit = json.loads(out)
    assert rc == 0 and hit["cache_hit"] is True and hit["evaluations"] == 0 and hit["key"] == first["key"]


# (the other sentences are the problem's own, tested in-process by test_attention_problem.py)
@pytest.mark.parametrize("args, says", [
    (("--heads", "8", "--seq", "64", "--head-dim", "96"), "error: head_dim must be one of 64, 128, 256, got 96."),
    (("--heads", "8", "--kv-heads", "3", "--seq", "64", "--head-dim", "64"), "error: kv_heads 3 does not divide "
                                                                             "heads 8"),
    (("--heads", "8", "--seq", "64", "--seq-k", "32", "--head-dim", "64", "--causal"),
     "error: causal attention with seq 64 > seq_k 32 would leave the first 32 query rows with no key"),
    (("--seq", "64", "--head-dim", "64"), "error: attention needs heads (query heads H)."),
])
def test_bad_input_is_one_sentence_with_exit_2_and_nothing_cached(tracea, args, says):
    rc, out, err = tracea("tune", "attention", *args, "--dtype", "fp32", "--backend", "cpu", "--budget", "2")
    lines = [line for line in (out + err).strip().splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in out + err and lines[0].startswith("error: "), (out, err)
    assert says in lines[0], (says, lines)
    rc, out, err = tracea("cache", "ls", "--json")
    keys = json.loads(out)["keys"] if rc == 0 else []
    assert all(k["problem"].get("seq") != 64 for k in keys), keys
