"""Pieces the CPU benchmark scripts (cpu_gemm.py, cpu_conv2d.py) share: a measurement that must have succeeded, and
the software line of a report (Python, numba, llvmlite, numpy and its BLAS). Not a script."""

from __future__ import annotations

import platform
from importlib import metadata

from tracea_cli.backends.base import Evaluation


def required(ev: Evaluation, what: str) -> Evaluation:
    """`ev` if it succeeded; else the run ends with what failed and why."""
    if not ev.ok:
        raise SystemExit(f"{what} failed: {ev.status.value}: {ev.reason}")
    return ev


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def blas() -> str:
    """numpy's BLAS, as its build configuration names it."""
    import numpy as np

    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{info.get('name', '?')} {info.get('version', '')}".strip()
    except Exception:  # older numpy: no dict mode
        return "unknown"


def software_line() -> str:
    return (f"- Software: Python {platform.python_version()}, numba {version('numba')}, llvmlite {version('llvmlite')}, "
            f"numpy {version('numpy')} ({blas()})")
