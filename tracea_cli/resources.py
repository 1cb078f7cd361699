"""Where the shipped data lives: kernel sources and hardware profiles.

Installed, they are package data inside `tracea_cli/` (the wheel maps the repository's top-level `kernels/` and
`profiles/` there); in a source checkout they sit beside the package.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _data_root(name: str) -> Path:
    packaged = Path(str(resources.files("tracea_cli"))) / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"tracea's {name}/ folder is missing from this installation; reinstall tracea.")


def kernels_dir() -> Path:
    return _data_root("kernels")


def profiles_dir() -> Path:
    return _data_root("profiles")


def kernel_source(relative: str) -> str:
    """Text of a kernel source file, e.g. `kernel_source("cuda/gemm_simt.cuh")`."""
    return (kernels_dir() / relative).read_text()
