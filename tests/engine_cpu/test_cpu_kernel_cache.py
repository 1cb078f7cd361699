"""The on-disk kernel cache: a second process loads a compiled CPU kernel instead of compiling it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from tracea_cli.backends.cpu import _load_cached_module, kernel_cache_dir, module_path  # noqa: E402
from tracea_cli.ops.gemm.families.numba import NUMBA  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402

PROBLEM = GemmProblem(37, 19, 29, dtype="fp64")
CONFIG = {"mr": 2, "nr": 8, "parallel": "n", "mc": 16, "kc": 8, "nc": 16, "pack_a": True, "threads": 2}
SOURCE = NUMBA.source(PROBLEM, CONFIG)

# A fresh process: get the kernel, run it on a ragged problem, report the seconds it took and the error.
CHILD = """
import json, sys
import numpy as np
from tracea_cli.backends.cpu import call, compiled_entry, kernel_cache_dir
from tracea_cli.ops.gemm.families.numba import NUMBA
from tracea_cli.ops.gemm.problem import GemmProblem
problem = GemmProblem(37, 19, 29, dtype="fp64")
config = {"mr": 2, "nr": 8, "parallel": "n", "mc": 16, "kc": 8, "nc": 16, "pack_a": True, "threads": 2}
(step,) = NUMBA.launch(problem, config).steps
kernel = compiled_entry(NUMBA.source(problem, config), step, kernel_cache_dir())
rng = np.random.default_rng(1)
a, b = rng.standard_normal((37, 29)), rng.standard_normal((29, 19))
c = np.full((37, 19), np.nan)
call(kernel, step, NUMBA.args(problem, {"A": a, "B": b, "C": c}))
print(json.dumps({"s": kernel.compile_s, "path": kernel.module_path, "err": float(np.abs(c - a @ b).max())}))
"""


def _child(cache: Path) -> dict:
    env = {**os.environ, "TRACEA_KERNEL_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_kernel_from_disk_much_faster(tmp_path):
    first = _child(tmp_path)
    second = _child(tmp_path)
    assert first["path"] == second["path"] == str(module_path(SOURCE, tmp_path))
    assert any((tmp_path / "__pycache__").glob("*.nbc")), "numba stored no machine code"
    assert first["err"] < 1e-12 and second["err"] < 1e-12
    assert second["s"] < first["s"] / 4, (first, second)


def test_an_unwritable_folder_falls_back_to_compiling_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert _load_cached_module(SOURCE, blocker / "numba") is None


def test_kernel_cache_dir_follows_the_environment(tmp_path):
    assert kernel_cache_dir({"TRACEA_CACHE_DIR": str(tmp_path)}) == tmp_path / "numba"
    assert kernel_cache_dir({"TRACEA_KERNEL_CACHE_DIR": str(tmp_path / "k")}) == tmp_path / "k"
    assert kernel_cache_dir({"TRACEA_KERNEL_CACHE_DIR": "off"}) is None


def test_the_module_name_changes_with_the_source(tmp_path):
    other = NUMBA.source(PROBLEM, {**CONFIG, "parallel": "m"})
    assert module_path(SOURCE, tmp_path) != module_path(other, tmp_path)
    assert module_path(SOURCE, tmp_path) == module_path(SOURCE, tmp_path)
    same_compiled_part = NUMBA.source(GemmProblem(500, 3, 9, dtype="fp64", layout="nt"), {**CONFIG, "mc": 64, "kc": 32})
    assert module_path(same_compiled_part, tmp_path) == module_path(SOURCE, tmp_path)  # run-time choices: one module
