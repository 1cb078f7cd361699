"""A cache written by the release before ops became plug-ins (data/cache-0.1.0-layout2.sqlite3: layout 2, GEMM keys
with layout/shape/epilogue columns, written by that release's own code with its own source hashes) opens migrated:
every key, trial, winner, baseline and search kept, each key found under the id today's code gives its problem. Every
key is stale today (the CPU kernel generator changed; the CUDA engine's mma template gained 3xTF32 on 2026-12-07,
which also gave fp32 a second family), yet still warm-starts its problem; pruning removes the stale keys and keeps a
current one. Nothing here monkeypatches the code under test."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import TuningCache, db
from tracea_cli.ops.registry import get_op
from tracea_cli.target import Target, arch_target
from tracea_cli.tune.setup import cache_key, key_is_current

RELEASE = Path(__file__).parent / "data" / "cache-0.1.0-layout2.sqlite3"
# What the release's file holds (see its trials below): problem label -> (backend, device class, trials, winner ms)
EXPECTED = {
    "gemm 2048x2048x2048 fp32 nn": ("cuda", "NVIDIA H200 sm_90 132SM", 3, 1.0),
    "gemm 4096x4096x4096 bf16 nt": ("cuda", "NVIDIA H200 sm_90 132SM", 3, 2.0),
    "gemm 1024x1024x1024 fp16 nn +bias_relu": ("cuda", "NVIDIA A100-SXM4-80GB sm_80 108SM", 2, 3.0),
    "gemm 512x512x512 fp32 nn": ("cpu", "Intel(R) Xeon(R) Processor | 2 threads | avx512", 3, 4.0),
    "gemm 256x256x256 fp64 nn": ("cpu", "Intel(R) Xeon(R) Processor | 2 threads | avx512", 2, 5.0),
}


@pytest.fixture
def migrated(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    shutil.copy(RELEASE, path)
    with TuningCache.open(path) as cache:
        yield cache


def _problem(key):
    return get_op(key.op).from_key(key.dtype, key.problem_dict)


def test_every_entry_is_kept_and_read_through_the_ops_own_key(migrated):
    assert any("migrated from layout 2 to 3" in w for w in migrated.warnings)
    keys = migrated.keys()
    assert sorted(_problem(k).label for k in keys) == sorted(EXPECTED)
    for key in keys:
        backend, device_class, trials, winner_ms = EXPECTED[_problem(key).label]
        assert (key.backend, key.device_class) == (backend, device_class)
        assert key.sizes_dict == _problem(key).sizes()
        assert len(migrated.trials(key)) == trials and migrated.winner(key).median_ms == winner_ms
        assert migrated.baseline(key)[1].median_ms == 2.0 and migrated.search_state(key).evaluations == trials
        assert migrated.resolve(key.id) == key
    assert db.SCHEMA_VERSION == 3


def test_cuda_keys_are_stale_since_the_mma_template_changed_but_warm_start_their_problem(migrated):
    for key in (k for k in migrated.keys() if k.backend == "cuda"):
        problem = _problem(key)
        target = arch_target(key.arch, key.device_class)
        today = cache_key(problem, OpBackend("gemm", "cuda"), target)
        assert today.source_hash != key.source_hash and not key_is_current(key), problem.label
        assert replace(today, toolchain=key.toolchain, source_hash=key.source_hash).digest == key.digest  # only those
        (sizes, config), *_ = migrated.nearest_winners(today)
        assert sizes == problem.sizes() and config == dict(migrated.winner(key).config)


def test_cpu_keys_are_stale_but_readable_and_still_warm_start_their_problem(migrated):
    for key in (k for k in migrated.keys() if k.backend == "cpu"):
        problem = _problem(key)
        target = Target("cpu", key.device_class, threads=2)
        today = cache_key(problem, OpBackend("gemm", "cpu"), target)
        assert not key_is_current(key) and today.digest != key.digest  # the CPU kernel generator changed
        (sizes, config), *_ = migrated.nearest_winners(today)
        assert sizes == problem.sizes() and config == dict(migrated.winner(key).config)


def test_prune_removes_only_the_stale_keys(migrated):
    """Beside the release's (all stale), a key today's tune makes for one of its problems, with a trial: kept."""
    old = next(k for k in migrated.keys() if k.backend == "cuda" and k.dtype == "bf16")
    problem = _problem(old)
    today = cache_key(problem, OpBackend("gemm", "cuda"), arch_target(old.arch, old.device_class))
    migrated.record_trial(today, migrated.winner(old))
    report = migrated.prune(is_current=key_is_current)
    assert report.keys_removed == len(EXPECTED)
    assert [k.digest for k in migrated.keys()] == [today.digest] and len(migrated.trials(today)) == 1


def test_an_export_of_that_release_imports_with_its_ids_checked_and_its_configurations_validated(tmp_path, migrated):
    """Export format 1 (the release's `tracea cache export`): keys read through the legacy fields, each key's id
    checked against the id that release gave it, every configuration checked against the real spaces."""
    from tracea_cli.backends.op_backend import config_validator

    with TuningCache.open(tmp_path / "imported" / "tuning.sqlite3") as cache:
        report = cache.import_(RELEASE.with_name("export-0.1.0-format1.json"), config_validator())
        assert (report.entries, report.keys_added, report.trials_added, report.winners_set) == (5, 5, 13, 5)
        assert {k.digest for k in cache.keys()} == {k.digest for k in migrated.keys()}
