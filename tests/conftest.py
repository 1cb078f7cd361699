"""Test-session defaults: no test writes into the real home folder; fixtures for tuning-cache keys, trials and a
cache in a temporary folder (the cache and reliability tests use them).

Every Tracea folder (tuning cache, profiles, compiled CPU kernels) points into one temporary folder for the whole
session unless a test sets its own (most do, per test, with tmp_path). Spawned worker processes inherit these.
"""

import os
import shutil
import sys
import tempfile

import pytest

from tracea_cli.cache import CacheKey, Trial, TuningCache

sys.path.insert(0, os.path.dirname(__file__))  # slow_tests, under pytest's importlib import mode
_SESSION_DIR = tempfile.mkdtemp(prefix="tracea-tests-")


def pytest_configure(config):
    os.environ.setdefault("TRACEA_CACHE_DIR", os.path.join(_SESSION_DIR, "cache"))
    os.environ.setdefault("TRACEA_DATA_DIR", os.path.join(_SESSION_DIR, "data"))
    os.environ.setdefault("TRACEA_KERNEL_CACHE_DIR", os.path.join(_SESSION_DIR, "kernels"))


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)

def make_key(m: int = 256, n: int | None = None, k: int | None = None, *, layout: str = "nn", epilogue: str = "none",
             **fields) -> CacheKey:
    """A GEMM key (m, n, k, layout and epilogue: the GEMM problem's key) on the CPU unless `fields` say otherwise."""
    base = dict(
        op="gemm", backend="cpu", dtype="fp32", device_class="test-cpu | 2 threads | avx512",
        source_hash="src-1", toolchain={"numba": "0.60.0"},
    )
    base.update(fields)
    sizes = {"m": m, "n": n or m, "k": k or m}
    return CacheKey(problem={**sizes, "layout": layout, "epilogue": epilogue}, sizes=sizes, **base)


def make_trial(block: int = 32, median_ms: float = 1.0, status: str = "ok", **fields) -> Trial:
    config = fields.pop("config", {"block": block, "order": "ijk"})
    if status == "ok":
        samples = (median_ms * 0.99, median_ms, median_ms * 1.01)
        return Trial(config, status="ok", samples_ms=samples, median_ms=median_ms, cv=0.01, rel_error=1e-7,
                     compile_s=0.25, **fields)
    return Trial(config, status=status, reason=fields.pop("reason", f"it {status}"), **fields)


@pytest.fixture
def cache_path(tmp_path):
    return tmp_path / "cache" / "tuning.sqlite3"


@pytest.fixture
def cache(cache_path):
    with TuningCache.open(cache_path) as c:
        yield c


@pytest.fixture
def mk_key():
    """make_key(m, n=None, k=None, layout=, epilogue=, **fields) -> CacheKey (gemm on the CPU unless fields say
    otherwise)."""
    return make_key


@pytest.fixture
def mk_trial():
    """make_trial(block, median_ms, status='ok', **fields) -> Trial."""
    return make_trial
