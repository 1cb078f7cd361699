"""Where the shipped data lives: kernel sources and hardware profiles.

Installed, they are package data inside `tracea_cli/` (the wheel maps the repository's top-level `kernels/` and
`profiles/` there); in a source checkout they sit beside the package.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.M)


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


def kernel_unit(relative: str) -> str:
    """A kernel header's text with its quoted includes pasted in (each once, `#pragma once` dropped): one
    self-contained translation unit, e.g. `kernel_unit("cuda/gemm_mma.cuh")`."""
    return _inline(relative, set())


def _inline(relative: str, seen: set[str]) -> str:
    if relative in seen:
        return ""
    seen.add(relative)
    folder = relative.rsplit("/", 1)[0]
    text = kernel_source(relative).replace("#pragma once\n", "")
    return _INCLUDE.sub(lambda m: _inline(f"{folder}/{m.group(1)}", seen), text)
