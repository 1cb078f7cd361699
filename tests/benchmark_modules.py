"""Benchmark scripts (benchmarks/NAME.py) loaded as modules for their tests: registered in sys.modules under
`module_name` while the `with` block runs (dataclasses and pickling look their classes up there), removed after."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextmanager
def loaded(name: str, module_name: str) -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[module_name]
