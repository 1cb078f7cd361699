"""Test-session defaults: no test writes into the real home folder.

Every Tracea folder (tuning cache, profiles, compiled CPU kernels) points into one temporary folder for the whole
session unless a test sets its own (most do, per test, with tmp_path). Spawned worker processes inherit these.
"""

import os
import shutil
import tempfile

_SESSION_DIR = tempfile.mkdtemp(prefix="tracea-tests-")


def pytest_configure(config):
    os.environ.setdefault("TRACEA_CACHE_DIR", os.path.join(_SESSION_DIR, "cache"))
    os.environ.setdefault("TRACEA_DATA_DIR", os.path.join(_SESSION_DIR, "data"))
    os.environ.setdefault("TRACEA_KERNEL_CACHE_DIR", os.path.join(_SESSION_DIR, "kernels"))


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)
