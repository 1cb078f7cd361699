"""Runs the generated CUDA GEMM source of one configuration on the CPU (see tracea_host_emulation.h).

The kernel text is exactly what NVRTC compiles (`gemm_source`), built here with g++ against CPU stand-ins for
CUDA's types and PTX, and launched by following the configuration's launch plan (`gemm_launch`: its memsets and
kernel steps in order, grids from the plan's own rules). Slow and small: for
checking indexing, predication, fragments and epilogues on awkward shapes without a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

import numpy as np

from tracea_cli.ops.dtypes import from_storage, get_dtype, to_storage
from tracea_cli.ops.gemm.families.engine import gemm_launch, gemm_source
from tracea_cli.ops.gemm.families.engine_space import tiling
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import KernelStep, MemsetStep

HERE = Path(__file__).resolve().parent


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def _flags() -> list[str]:
    flags = ["-std=c++20", "-O1", "-pthread", f"-I{HERE}"]
    if os.environ.get("TRACEA_EMULATOR_SANITIZE"):
        flags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    return flags


def build_launcher(workdir: Path) -> Path:
    out = workdir / "emulator_main.o"
    subprocess.run([compiler(), *_flags(), "-c", str(HERE / "emulator_main.cpp"), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    return out


def build(problem: GemmProblem, config: Mapping, workdir: Path, launcher: Path) -> Path:
    """Compile one configuration into an emulator executable."""
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "kernel.cpp"
    source.write_text(gemm_source(problem, config))
    exe = workdir / "emulator"
    smem = tiling(problem, config).smem_bytes
    cmd = [compiler(), *_flags(), "-DTRACEA_HOST_EMULATION", f"-DEMULATED_SMEM_BYTES={smem}", str(source),
           str(launcher), "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"g++ failed for {config}:\n{result.stderr[-4000:]}")
    return exe


def run(exe: Path, problem: GemmProblem, config: Mapping, inputs: Mapping[str, np.ndarray], workdir: Path, *,
        timeout_s: float = 120.0) -> np.ndarray:
    """C (float64 values) as the emulated kernel computes it, from a NaN-poisoned output. `inputs` by tensor name, as
    `make_inputs` gives them ("A", "B", and "bias", "residual" where the epilogue has them)."""
    dtype = problem.dtype
    plan = gemm_launch(problem, config)
    elem = get_dtype(dtype).storage_bytes
    for name, tensor in (("a", "A"), ("b", "B"), ("bias", "bias"), ("residual", "residual")):
        values = inputs.get(tensor)
        path = workdir / f"{name}.bin"
        if values is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(np.ascontiguousarray(to_storage(values, dtype)).tobytes())
    poison = to_storage(np.full((problem.m, problem.n), np.nan), dtype)
    (workdir / "c.bin").write_bytes(poison.tobytes())
    ldb = problem.n if problem.layout == "nn" else problem.k
    lines = [f"dims {problem.m} {problem.n} {problem.k} {problem.k} {ldb} {problem.n} {elem}"]
    sizes = {"M": problem.m, "N": problem.n, "K": problem.k}
    for step in plan.steps:
        if isinstance(step, MemsetStep):
            assert step.buffer == "workspace" and step.bytes_per == "mn", step
            lines.append(f"memset {problem.m * problem.n * step.elem_bytes}")
        elif isinstance(step, KernelStep):
            assert step.block[1:] == (1, 1) and step.cluster is None, step
            x, y, z = plan.grid(step, sizes)
            lines.append(f"kernel {step.name} {x} {y} {z} {step.block[0]}")
        else:
            raise AssertionError(f"the emulator cannot run a {type(step).__name__}")
    (workdir / "launch.txt").write_text("\n".join(lines) + "\n")
    result = subprocess.run([str(exe), str(workdir)], capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"emulated kernel failed ({result.returncode}): {result.stderr[-2000:]}")
    raw = np.frombuffer((workdir / "c.bin").read_bytes(), dtype=poison.dtype).reshape(problem.m, problem.n)
    return from_storage(raw, dtype)
