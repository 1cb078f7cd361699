"""`tracea cache prune` never deletes a current result: it asks the code that made the key (tune.setup.key_is_current,
the backends' own source hashing). End to end, with the real CPU and CUDA hashing and nothing monkeypatched: a key
`tracea tune` wrote on the CPU, CUDA keys made as tune makes them for a problem of every CUDA family (on a GPU, one
that tune itself wrote), and the same keys with another source hash, which are the only ones removed."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import Trial, TuningCache
from tracea_cli.cli import app
from tracea_cli.ops.gemm.families.engine_space import hand_picked
from tracea_cli.ops.gemm.families.wgmma_space import default_config
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.target import arch_target
from tracea_cli.tune.setup import cache_key


@pytest.fixture
def run(tmp_path):
    env = {"TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1"}

    def invoke(*args: str):
        result = CliRunner().invoke(app, list(args), env=env)
        assert "Traceback" not in result.output, result.output
        return result

    return invoke


def _ok(config) -> Trial:
    return Trial(config, status="ok", samples_ms=(1.0, 1.0, 1.0), median_ms=1.0, cv=0.0, rel_error=1e-4)


# A problem per CUDA family, with the target it is tuned on and a configuration of that family
CUDA_CASES = {
    "simt": (GemmProblem(2048, 2048, 2048, "fp32"), "sm_80"),
    "mma": (GemmProblem(1024, 1024, 1024, "fp16", epilogue="bias_relu"), "sm_80"),
    "wgmma": (GemmProblem(4096, 4096, 4096, "bf16", "nt"), "sm_90"),
}


def _config(family: str, problem: GemmProblem, arch: str) -> dict:
    target = arch_target(arch)
    return dict(default_config(problem, target)) if family == "wgmma" else dict(hand_picked(problem, target)[0])


@pytest.mark.timeout(900)
def test_prune_keeps_what_tune_wrote_and_removes_only_stale_keys(run, tmp_path):
    tuned = run("tune", "gemm", "--m", "64", "--backend", "cpu", "--budget", "2", "--json")
    assert tuned.exit_code == 0, tuned.output
    cpu_id = json.loads(tuned.stdout)["key"]
    cuda = OpBackend("gemm", "cuda")
    stale = []
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        for family, (problem, arch) in CUDA_CASES.items():
            key = cache_key(problem, cuda, arch_target(arch, f"test GPU {arch}"))
            config = _config(family, problem, arch)
            assert config["family"] == family and cuda.why_invalid(problem, arch_target(arch), config) is None
            cache.record_trial(key, _ok(config))
            cache.set_winner(key, _ok(config))
            old = replace(key, source_hash="0123456789abcdef")  # written by kernel sources that are gone
            cache.record_trial(old, _ok(config))
            stale.append(old.id)
        cpu_key = cache.resolve(cpu_id)
        cache.record_trial(replace(cpu_key, source_hash="fedcba9876543210"), _ok({"mr": 4}))
        stale.append(replace(cpu_key, source_hash="fedcba9876543210").id)
        before = {k.id for k in cache.keys()}

    dry = run("cache", "prune", "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout)["keys_removed"] == len(stale), dry.output
    pruned = run("cache", "prune", "--json")
    assert pruned.exit_code == 0 and json.loads(pruned.stdout)["keys_removed"] == len(stale)
    kept = {r["id"] for r in json.loads(run("cache", "ls", "--json").stdout)["keys"]}
    assert kept == before - set(stale) and cpu_id in kept
    again = run("tune", "gemm", "--m", "64", "--backend", "cpu", "--budget", "2", "--json")
    assert json.loads(again.stdout)["cache_hit"] is True  # what tune wrote is still its own result


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_prune_keeps_a_key_tune_wrote_on_this_gpu(run, tmp_path):
    """On a GPU: tune writes trials of every family that applies here into its key; prune keeps it."""
    pytest.importorskip("cupy")
    import cupy

    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device is visible")
    except Exception as e:
        pytest.skip(f"no usable CUDA device: {e}")
    tuned = run("tune", "gemm", "--m", "1024", "--dtype", "bf16", "--backend", "cuda", "--budget", "12", "--json")
    assert tuned.exit_code == 0, tuned.output
    key = json.loads(tuned.stdout)["key"]
    with TuningCache.open(tmp_path / "cache" / "tuning.sqlite3") as cache:
        families = {t.config.get("family") for t in cache.trials(cache.resolve(key))}
    assert len(families) >= 2, families  # e.g. wgmma and mma on an H200
    pruned = run("cache", "prune", "--json")
    assert pruned.exit_code == 0 and json.loads(pruned.stdout)["keys_removed"] == 0
    assert json.loads(run("tune", "gemm", "--m", "1024", "--dtype", "bf16", "--backend", "cuda", "--budget", "12",
                          "--json").stdout)["cache_hit"] is True
