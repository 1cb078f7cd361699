"""Runs the generated CUDA source of one attention configuration on the CPU (see tracea_host_emulation.h and
attention_emulation.h for the warp shuffles).

The kernel text is exactly what NVRTC compiles (the family's `source`), built with g++ against CPU stand-ins for
CUDA's types and PTX, and launched by the configuration's launch plan (its kernel steps in order, grids from the
plan's own rules, the parameters from the family's `args`, the workspace as large as the plan says, NaN-poisoned).
Slow and small: for checking indexing, masking, fragments, the online softmax and split-KV's combine on awkward shapes
without a GPU.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.ops.dtypes import from_storage, to_storage

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tracea_emulator_gemm_harness", HERE / "harness.py")
_gemm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gemm)
compiler, _flags = _gemm.compiler, _gemm._flags
INTS = ("seq", "seq_k", "heads", "kv_heads", "q_sb", "q_sh", "q_sr", "kv_sb", "kv_sh", "kv_sr")


def build_launcher(workdir: Path) -> Path:
    out = workdir / "attention_main.o"
    if not out.exists():
        subprocess.run([compiler(), *_flags(), "-c", str(HERE / "attention_main.cpp"), "-o", str(out)], check=True,
                       capture_output=True, text=True)
    return out


def build(source: str, smem_bytes: int, workdir: Path, launcher: Path) -> Path:
    """Compile one configuration's source into an emulator executable."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "kernel.cpp"
    path.write_text(source)
    exe = workdir / "emulator"
    cmd = [compiler(), *_flags(), "-DTRACEA_HOST_EMULATION", f"-DEMULATED_SMEM_BYTES={smem_bytes}", str(path),
           str(launcher), "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"g++ failed:\n{result.stderr[-4000:]}")
    return exe


def run(exe: Path, problem: Any, family: Any, config: Mapping, inputs: Mapping[str, np.ndarray], workdir: Path, *,
        timeout_s: float = 300.0) -> dict[str, np.ndarray]:
    """out (float64 values, from a NaN-poisoned out) and, where the problem has it, lse, as the emulated kernel
    computes them."""
    p = problem
    plan = family.launch(p, config)
    for name in ("q", "k", "v"):
        (workdir / f"{name}.bin").write_bytes(np.ascontiguousarray(to_storage(inputs[name], p.dtype)).tobytes())
    poison = to_storage(np.full(p.shape("out"), np.nan), p.dtype)
    (workdir / "out.bin").write_bytes(poison.tobytes())
    operands = {**inputs, "out": poison, **({"lse": np.empty(p.shape("lse"), np.float32)} if p.lse else {})}
    args = family.args(p, operands)
    lse_elements = int(np.prod(p.shape("lse"))) if p.lse else 0
    lines = [f"ints {' '.join(str(args[n]) for n in INTS)}", f"buffers {lse_elements} {plan.workspace_bytes(args)}"]
    for step in plan.steps:  # kernels only: the family's plans have no memset
        assert step.block[1:] == (1, 1)
        lines.append(f"kernel {step.name} {' '.join(map(str, plan.grid(step, args)))} {step.block[0]}")
    (workdir / "launch.txt").write_text("\n".join(lines) + "\n")
    result = subprocess.run([str(exe), str(workdir)], capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"emulated kernel failed ({result.returncode}): {result.stderr[-2000:]}")
    raw = np.frombuffer((workdir / "out.bin").read_bytes(), dtype=poison.dtype).reshape(p.shape("out"))
    outputs = {"out": from_storage(raw, p.dtype)}
    if p.lse:
        outputs["lse"] = np.frombuffer((workdir / "lse.bin").read_bytes(), dtype=np.float32).reshape(
            p.shape("lse")).astype(np.float64)
    return outputs
