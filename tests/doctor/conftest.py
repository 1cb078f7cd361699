"""Fixtures for the doctor's tests: settings in a temporary folder (never the real home) and the stand-in NVML."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # doctor_fakes, under pytest's importlib import mode


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """TRACEA_CACHE_DIR and TRACEA_DATA_DIR in tmp_path; returns the matching Settings."""
    from tracea_cli.config import Settings

    monkeypatch.setenv("TRACEA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return Settings.from_env()


@pytest.fixture
def use_nvml(monkeypatch):
    """Make the doctor see the stand-in NVML of a scenario, and no CuPy (whatever this machine has), so the outcome
    is the same everywhere: `use_nvml("thermal")` returns the FakeSystem."""
    from doctor_fakes import NO_CUPY, fake_nvml, scenario

    from tracea_cli.doctor import cuda_runtime, nvidia

    def install(name: str):
        system = scenario(name)
        module = fake_nvml(system)
        monkeypatch.setattr(nvidia, "load_nvml", lambda: module)
        monkeypatch.setattr(cuda_runtime, "probe_cuda_runtime", lambda: NO_CUPY)
        return system

    return install
