"""Helpers of the export tests: the CLI runner, a C/C++ compiler with cuda.h, and running programs against the fake
libcuda.so.1 (fake_libcuda.c), which lets the exported runtime run its logic without a GPU."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import CacheKey
from tracea_cli.cli import app
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.ops.registry import get_op

HERE = Path(__file__).parent
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[cuda]')")


def cli(args: list[str], tmp: Path):
    env = {"TRACEA_CACHE_DIR": str(tmp / "cache"), "TRACEA_DATA_DIR": str(tmp / "data"), "COLUMNS": "160",
           "NO_COLOR": "1"}
    result = CliRunner().invoke(app, ["export", *args], env=env)
    assert "Traceback" not in result.output, result.output
    return result


def cache_key(problem, device: str, arch: str | None) -> CacheKey:
    """The tuning cache's key of a CUDA tuning of `problem` on `device` (a device class) for `arch`."""
    return CacheKey(op=problem.op, backend="cuda", dtype=problem.dtype, problem=problem.key(), sizes=problem.sizes(),
                    device_class=device, source_hash="s", toolchain={"nvrtc": "13.0"}, arch=arch)


def tune_command_problem(text: str):
    """(the problem, the backend) of the `tracea tune OP --opt value ...` command quoted in `text` (a hint)."""
    (command,) = re.findall(r"`(tracea tune [^`]*)`", text)
    words = shlex.split(command)
    op = get_op(words[2])
    options = dict(zip(words[3::2], words[4::2]))
    assert all(name.startswith("--") for name in options) and len(words[3:]) == 2 * len(options), command
    backend = options.pop("--backend")
    types = {o.flag: o.type for o in op.options}
    return op.problem(**{flag[2:].replace("-", "_"): types[flag](value) for flag, value in options.items()}), backend


def cuda_include() -> str | None:
    """A folder with cuda.h: the NVRTC wheel's headers, a CUDA toolkit, or None."""
    candidates = []
    try:
        candidates.append(nvrtc.cuda_include_dir())
    except Exception:
        pass
    candidates += [os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include",
                   *sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True)]
    return next((c for c in candidates if c and Path(c, "cuda.h").is_file()), None)


def compiler(lang: str = "c++") -> str | None:
    names = ("g++", "c++", "clang++") if lang == "c++" else ("gcc", "cc", "clang")
    return next((shutil.which(n) for n in names if shutil.which(n)), None)


def build(tool: str, sources: list[str], out: Path, include: list[str], *extra: str) -> Path:
    cmd = [tool, *sources, "-o", str(out), *[f"-I{i}" for i in include], *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr[-4000:]}"
    return out


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def problem_of(doc: dict, shape: dict):
    """The problem of an export's manifest at one of its tuned shapes (its op, dtype and other fields)."""
    op = get_op(doc["op"])
    fields = {o.name: doc[o.name] for o in op.options if not o.size and o.key and o.name != "dtype"}
    return op.from_key(doc["dtype"], {**fields, **shape})


def backend_plan(doc: dict, entry: dict) -> LaunchPlan:
    """The launch plan the CUDA backend's family makes for a `launch` entry of the manifest `doc` (its shape's
    configuration); the entry's description must be that plan, as manifest.json writes it."""
    (config,) = [c["values"] for c in doc["config"] if c["shape"] == entry["shape"] and c["arch"] == entry["arch"]]
    problem = problem_of(doc, entry["shape"])
    plan = OpBackend(doc["op"], "cuda").family_of(config).launch(problem, config)
    assert json.loads(json.dumps(plan.as_dict())) == entry["description"]
    return plan


def backend_grid(doc: dict, entry: dict, kernel: str, m: int, n: int, k: int, resident: int | None = None) -> str:
    """The grid the CUDA backend gives kernel step `kernel` of a launch entry for an M x N x K call (LaunchPlan.grid,
    what backends/cuda.py launches with), written as the fake driver logs it: the exported runtime must compute the
    same."""
    plan = backend_plan(doc, entry)
    step = next(s for s in plan.kernels if s.name == kernel)
    return ",".join(str(g) for g in plan.grid(step, {"M": m, "N": n, "K": k}, resident))


def run_with_fake(program: Path, args: list[str], fake_library: Path, **fake: str) -> tuple[list[str], list[str]]:
    """(stdout lines, the fake driver's log lines) of a run against the fake driver configured by FAKE_CUDA_*."""
    out, log, _ = run_probe(program, args, fake_library, **fake)
    return out, log


def run_probe(program: Path, args: list[str], fake_library: Path, **fake: str) -> tuple[list[str], list[str], dict[str, str]]:
    """As run_with_fake, plus the buffers probe.cpp reports ({"a": ..., "b": ..., "c": ..., ...}; {} if none)."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_library), **{f"FAKE_CUDA_{k.upper()}": v for k, v in fake.items()}}
    done = subprocess.run([str(program), *args], capture_output=True, text=True, env=env, timeout=60)
    lines = done.stderr.splitlines()
    log = [line[4:] for line in lines if line.startswith("cu: ")]
    buffers = next((fields(line) for line in lines if line.startswith("probe: ")), {})
    return done.stdout.splitlines(), log, buffers


def fields(line: str) -> dict[str, str]:
    """'launch module=1 name=x grid=1,2,3' -> {'module': '1', 'name': 'x', 'grid': '1,2,3'}."""
    return dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)


def build_probe(folder: Path, toolchain, *, elem_bytes: int, dtype_code: int, epilogue_code: int = 0) -> Path:
    """probe.cpp built against the export in `folder` (tracea::DType codes as in tracea_runtime.h, tracea::Epilogue
    codes as in tracea_gemm.h)."""
    doc = read_manifest(folder)
    p = doc["prefix"]
    return build(toolchain["cxx"], [str(HERE / "probe.cpp")], folder / "probe", [str(folder), toolchain["include"]],
                 "-std=c++17", "-Wall", "-Wextra", "-Werror", f'-DEXPORT_HEADER="{doc["files"]["c_header"]}"',
                 f"-DPROBE_LOAD={p}_load", f"-DPROBE_UNLOAD={p}_unload", f"-DPROBE_ELEM_BYTES={elem_bytes}",
                 f"-DPROBE_DTYPE={dtype_code}", f"-DPROBE_EPILOGUE={epilogue_code}", "-ldl", "-lpthread")
