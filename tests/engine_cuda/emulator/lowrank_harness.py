"""Runs the generated CUDA source of one lowrank-mlp configuration on the CPU (see tracea_host_emulation.h).

The kernel text is exactly what NVRTC compiles (the family's `source`), built here with g++ against CPU stand-ins
for CUDA's types and PTX, and launched by following the configuration's launch plan (its kernel steps in order,
grids from the plan's own rules, the scratch T placed as the plan says). Slow and small: for checking indexing,
predication, fragments, the hand-over between the phases and the epilogues on awkward shapes without a GPU.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.launch import KernelStep

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tracea_emulator_gemm_harness", HERE / "harness.py")
_gemm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gemm)
compiler, _flags = _gemm.compiler, _gemm._flags


def build_launcher(workdir: Path) -> Path:
    out = workdir / "lowrank_main.o"
    if not out.exists():
        subprocess.run([compiler(), *_flags(), "-c", str(HERE / "lowrank_main.cpp"), "-o", str(out)], check=True,
                       capture_output=True, text=True)
    return out


def build(source: str, smem_bytes: int, workdir: Path, launcher: Path) -> Path:
    """Compile one configuration's source into an emulator executable."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "kernel.cpp"
    path.write_text(source)
    exe = workdir / "emulator"
    cmd = [compiler(), *_flags(), "-DTRACEA_HOST_EMULATION", f"-DEMULATED_SMEM_BYTES={max(smem_bytes, 16)}", str(path),
           str(launcher), "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"g++ failed:\n{result.stderr[-4000:]}")
    return exe


def run(exe: Path, problem: Any, family: Any, config: Mapping, inputs: Mapping[str, np.ndarray], workdir: Path, *,
        timeout_s: float = 300.0) -> np.ndarray:
    """y (float64 values) as the emulated kernels compute it, from a NaN-poisoned y."""
    p = problem
    plan = family.launch(p, config)
    for name, tensor in (("x", "x"), ("u", "U"), ("v", "V"), ("bias", "bias"), ("residual", "residual")):
        values = inputs.get(tensor)
        path = workdir / f"{name}.bin"
        if values is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(np.ascontiguousarray(to_storage(values, p.dtype)).tobytes())
    poison = to_storage(np.full((p.m, p.d_out), np.nan), p.dtype)
    (workdir / "y.bin").write_bytes(poison.tobytes())
    sizes = {"M": p.m, "N": p.d_out, "K": p.d_in, "R": p.rank}
    placed, total = plan.scratch_layout(sizes)
    ldt = placed[0].ld if placed else 0
    lines = [f"dims {p.m} {p.d_in} {p.rank} {p.d_out} {ldt}"]
    if total:
        lines.append(f"scratch {total}")
    for step in plan.steps:
        assert isinstance(step, KernelStep) and step.block[1:] == (1, 1) and step.cluster is None, step
        x, y, z = plan.grid(step, sizes)
        lines.append(f"kernel {step.name} {x} {y} {z} {step.block[0]}")
    (workdir / "launch.txt").write_text("\n".join(lines) + "\n")
    result = subprocess.run([str(exe), str(workdir)], capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"emulated kernel failed ({result.returncode}): {result.stderr[-2000:]}")
    raw = np.frombuffer((workdir / "y.bin").read_bytes(), dtype=poison.dtype).reshape(p.m, p.d_out)
    return from_storage(raw, p.dtype)
