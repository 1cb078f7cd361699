"""Fixtures for the CUDA engine tests: targets built from the architecture table, the CPU emulator, a real GPU."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tracea_cli.target import Target, limits_for

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # space_walk, under pytest's importlib import mode


def arch_target(arch: str, sm_count: int | None = None) -> Target:
    limits = limits_for(arch)
    if sm_count is not None:
        limits = replace(limits, sm_count=sm_count)
    return Target(backend="cuda", device_class=f"test {arch}", arch=arch, limits=limits)


def slow_enabled() -> bool:
    from slow_tests import SLOW_TESTS

    return SLOW_TESTS


@pytest.fixture(scope="session")
def make_target():
    return arch_target


@pytest.fixture(scope="session")
def sm90() -> Target:
    return arch_target("sm_90", sm_count=132)


@pytest.fixture(scope="session")
def sm80() -> Target:
    return arch_target("sm_80", sm_count=108)


@pytest.fixture(scope="session")
def emulator(tmp_path_factory):
    """The host emulator's harness module and its launcher object (skips without a C++20 compiler)."""
    spec = importlib.util.spec_from_file_location("tracea_emulator_harness", HERE / "emulator" / "harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    if harness.compiler() is None:
        pytest.skip("no C++ compiler (g++) to build the host emulator")
    workdir = tmp_path_factory.mktemp("emulator")
    return harness, workdir, harness.build_launcher(workdir)


@pytest.fixture(scope="session")
def gpu_target() -> Target:
    """The first CUDA device, or a skip saying why there is none."""
    try:
        import cupy
    except ImportError:
        pytest.skip("CuPy is not installed (GPU tests need the cuda extra and an NVIDIA GPU)")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device is visible")
    except Exception as e:  # no driver, or the driver refuses
        pytest.skip(f"no usable CUDA device: {e}")
    from tracea_cli.backends.cuda import device_target

    return device_target(0)
