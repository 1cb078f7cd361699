"""Runs the generated CUDA source of one configuration on the CPU (see tracea_host_emulation.h): GEMM's through its
own launcher (build, run), any family's through a launcher that follows the launch plan (build_plan, run_plan).

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
from tracea_cli.ops.launch import KernelStep, LaunchPlan, MemsetStep

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
    # this launcher's workspace is made by its memset line, sized by it: the plan's whole workspace, all zeros (run
    # once, one call: a `once` memset and a per-call one are the same here; build_plan/run_plan follow them exactly)
    workspace = plan.workspace_bytes(sizes)
    if workspace and not any(isinstance(s, MemsetStep) for s in plan.steps):
        lines.append(f"memset {workspace}")  # a plan whose kernels overwrite their workspace, without a memset
    for step in plan.steps:
        if isinstance(step, MemsetStep):
            assert step.buffer == "workspace" and step.bytes_per == "mn", step
            lines.append(f"memset {max(problem.m * problem.n * step.elem_bytes, workspace)}")
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


# ---- any family: a program built from its source and launch plan, run by following the plan -----------------------

def build_plan_launcher(workdir: Path) -> Path:
    out = workdir / "plan_main.o"
    subprocess.run([compiler(), *_flags(), "-c", str(HERE / "plan_main.cpp"), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    return out


def _is_pointer(value) -> bool:
    return value is None or isinstance(value, np.ndarray)


def _shim(plan: LaunchPlan, values: Mapping) -> str:
    """tracea_emulated_call for the plan's kernels: each declared with its parameters (pointers as void*, ints), and
    called with the launcher's arguments in signature order."""
    lines = ["#include <cstdint>", "#include <string>", "#include <vector>"]
    calls = []
    for step in plan.kernels:
        names = plan.step_params(step)
        kinds = ["void *" if _is_pointer(values.get(n)) or n == "workspace" else "int" for n in names]
        lines.append(f'extern "C" void {step.name}({", ".join(kinds)});')
        args = ", ".join(f"reinterpret_cast<void *>(a[{i}])" if k == "void *" else f"static_cast<int>(a[{i}])"
                         for i, k in enumerate(kinds))
        calls.append(f'  if (name == "{step.name}") return {step.name}({args});')
    lines += ["void tracea_emulated_call(const std::string &name, const std::vector<std::intptr_t> &a) {", *calls, "}"]
    return "\n".join(lines) + "\n"


def build_plan(source: str, plan: LaunchPlan, values: Mapping, workdir: Path, launcher: Path) -> Path:
    """Compile a family's source with a shim for its plan's kernels into an emulator executable. `values` are the
    family's arguments (arrays or None for pointers, ints for sizes): they tell pointers from ints."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "kernel.cpp").write_text(source)
    (workdir / "shim.cpp").write_text(_shim(plan, values))
    smem = max(k.dynamic_smem_bytes for k in plan.kernels)
    exe = workdir / "plan_emulator"
    cmd = [compiler(), *_flags(), "-DTRACEA_HOST_EMULATION", f"-DEMULATED_SMEM_BYTES={max(smem, 16)}",
           str(workdir / "kernel.cpp"), str(workdir / "shim.cpp"), str(launcher), "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"g++ failed:\n{result.stderr[-4000:]}")
    return exe


def run_plan(exe: Path, plan: LaunchPlan, values: Mapping, outputs: tuple[str, ...], workdir: Path, *,
             timeout_s: float = 120.0, calls: int = 1, keep_workspace: bool = False) -> dict[str, np.ndarray]:
    """Follow `plan` over `values` (the family's arguments: host arrays in storage format by pointer name, ints by
    size name): the workspace placed as plan.scratch_layout says, memsets, then each kernel step whose `when` holds,
    grids from the plan's rules. Returns the arrays named in `outputs`, as the kernels left them.

    A memset marked `once` runs when the workspace is allocated, not per call (as the CUDA backend's bind does). With
    `calls` > 1 the plan's steps run that many times on the same workspace, each output reloaded from `values`
    (poisoned) before each call after the first; the outputs of call i (from 1) come back as "NAME@i" as well. With
    `keep_workspace`, the workspace as the last call left it comes back as "workspace" (raw bytes)."""
    sizes = {k: int(v) for k, v in values.items() if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
    arrays = {k: v for k, v in values.items() if isinstance(v, np.ndarray)}
    index = {name: i for i, name in enumerate(arrays)}
    lines = []
    for name, array in arrays.items():
        file = f"{name}.bin"
        (workdir / file).write_bytes(np.ascontiguousarray(array).tobytes())
        lines.append(f"buffer {index[name]} {array.nbytes} {file}")
    placed, workspace_bytes = plan.scratch_layout(sizes)
    if workspace_bytes:
        index["workspace"] = len(index)
        # a garbage-filled allocation (0xFF bytes: NaN sums, counters of -1): only the plan's memsets make it zero
        lines.append(f"buffer {index['workspace']} {workspace_bytes} -")
    # the plan's scratch: addresses inside the workspace, and their leading dimensions as sizes
    inside = {buf.name: f"p{index['workspace']}+{buf.offset}" for buf in placed}
    sizes.update({buf.ld_name: buf.ld for buf in placed})
    memsets = [s for s in plan.steps if isinstance(s, MemsetStep)]
    for step in memsets:
        assert step.buffer == "workspace" and step.bytes_per == "mn", step
    mn = sizes["M"] * sizes["N"]
    lines += [f"memset {index['workspace']} {mn * s.elem_bytes}" for s in memsets if not s.per_call()]
    for call in range(1, calls + 1):
        if call > 1:
            lines += [f"load {index[name]} {name}.bin" for name in outputs]
        for step in plan.steps:
            if isinstance(step, MemsetStep):
                if step.per_call():
                    lines.append(f"memset {index['workspace']} {sizes['M'] * sizes['N'] * step.elem_bytes}")
            elif isinstance(step, KernelStep):
                assert step.block[1:] == (1, 1) and step.cluster is None, step
                if not step.runs(sizes):
                    continue
                x, y, z = plan.grid(step, sizes)
                args = [f"i{sizes[n]}" if n in sizes else inside.get(n, f"p{index.get(n, -1)}")
                        for n in plan.step_params(step)]
                lines.append(f"kernel {step.name} {x} {y} {z} {step.block[0]} {' '.join(args)}")
            else:
                raise AssertionError(f"the emulator cannot run a {type(step).__name__}")
        lines += [f"write {index[name]} {name}.{call}.out" for name in outputs]
    if keep_workspace and workspace_bytes:
        lines.append(f"write {index['workspace']} workspace.out")
    (workdir / "launch.txt").write_text("\n".join(lines) + "\n")
    result = subprocess.run([str(exe), str(workdir)], capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"emulated kernel failed ({result.returncode}): {result.stderr[-2000:]}")

    def read(name: str, call: int) -> np.ndarray:
        raw = (workdir / f"{name}.{call}.out").read_bytes()
        return np.frombuffer(raw, dtype=arrays[name].dtype).reshape(arrays[name].shape)

    out = {name: read(name, calls) for name in outputs}
    out.update({f"{name}@{call}": read(name, call) for name in outputs for call in range(1, calls + 1)})
    if keep_workspace and workspace_bytes:
        out["workspace"] = np.frombuffer((workdir / "workspace.out").read_bytes(), dtype=np.uint8)
    return out
