"""Fixtures of the export tests: a C/C++ toolchain with cuda.h, and the fake libcuda.so.1 built once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # export_helpers, under pytest's importlib import mode

from export_helpers import HERE, build, compiler, cuda_include  # noqa: E402


@pytest.fixture(scope="session")
def toolchain():
    cxx, cc, include = compiler("c++"), compiler("c"), cuda_include()
    if not (cxx and cc and include):
        pytest.skip(f"a C/C++ compiler and cuda.h are needed (g++: {cxx}, gcc: {cc}, cuda.h in: {include})")
    return {"cxx": cxx, "cc": cc, "include": include}


@pytest.fixture(scope="session")
def fake_driver(tmp_path_factory, toolchain) -> Path:
    """A folder holding the fake libcuda.so.1; put it on LD_LIBRARY_PATH."""
    folder = tmp_path_factory.mktemp("fake_driver")
    build(toolchain["cc"], [str(HERE / "fake_libcuda.c")], folder / "libcuda.so.1", [toolchain["include"]],
          "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-lpthread")
    return folder
