"""Helpers of the export tests: the CLI runner, a C/C++ compiler with cuda.h, and running programs against the fake
libcuda.so.1 (fake_libcuda.c), which lets the exported runtime run its logic without a GPU."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracea_cli.backends import nvrtc
from tracea_cli.backends.cuda import grid_extent
from tracea_cli.cli import app

HERE = Path(__file__).parent
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[cuda]')")


def cli(args: list[str], tmp: Path):
    env = {"TRACEA_CACHE_DIR": str(tmp / "cache"), "TRACEA_DATA_DIR": str(tmp / "data"), "COLUMNS": "160",
           "NO_COLOR": "1"}
    result = CliRunner().invoke(app, ["export", *args], env=env)
    assert "Traceback" not in result.output, result.output
    return result


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


def backend_grid(description: dict, kernel: str, m: int, n: int, k: int) -> str:
    """The grid the CUDA backends give kernel step `kernel` of a launch description for an M x N x K call
    (cuda.grid_extent), written as the fake driver logs it: the exported runtime must compute the same."""
    step = next(s for s in description["steps"] if s.get("name") == kernel)
    return ",".join(str(grid_extent(step["grid"][axis], description, m, n, k)) for axis in "xyz")


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
    """probe.cpp built against the export in `folder` (tracea::DType / tracea::Epilogue codes as in tracea.hpp)."""
    doc = read_manifest(folder)
    p = doc["prefix"]
    return build(toolchain["cxx"], [str(HERE / "probe.cpp")], folder / "probe", [str(folder), toolchain["include"]],
                 "-std=c++17", "-Wall", "-Wextra", "-Werror", f'-DEXPORT_HEADER="{doc["files"]["c_header"]}"',
                 f"-DPROBE_LOAD={p}_load", f"-DPROBE_UNLOAD={p}_unload", f"-DPROBE_ELEM_BYTES={elem_bytes}",
                 f"-DPROBE_DTYPE={dtype_code}", f"-DPROBE_EPILOGUE={epilogue_code}", "-ldl", "-lpthread")
