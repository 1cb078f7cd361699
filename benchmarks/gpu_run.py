"""Pieces the GPU benchmark scripts share: the run's provenance (date, device, versions, command), a configuration
and a median in one line each, compiling candidates in parallel, and writing the report after every problem (a run cut short keeps what it measured).
Not a script: `gemm_engine.py` and `gemm_small_m.py` import it."""

from __future__ import annotations

import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tracea_cli.backends.base import CompileFailed, Evaluation
from tracea_cli.stats import summarize


def run_meta(target: Any, argv: list[str] | None) -> dict[str, Any]:
    """Where and how this run measured: date, device, driver and runtime, command line, versions, target."""
    import cupy

    from tracea_cli.backends import nvrtc
    from tracea_cli.backends.cuda import GENERATOR_VERSION

    props = cupy.cuda.runtime.getDeviceProperties(target.device_index or 0)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "driver": cupy.cuda.runtime.driverGetVersion(),
        "runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
        "generator": GENERATOR_VERSION,
        "nvrtc": nvrtc.version(),
        "cupy": cupy.__version__,
        "python": platform.python_version(),
        "target": {"device_class": target.device_class, "arch": target.arch},
    }


def provenance_lines(meta: dict[str, Any]) -> list[str]:
    """The report's first facts: when, on what, by which command."""
    return [f"- date: {meta['date']}",
            f"- device: {meta['device']} (driver {meta['driver']}, CUDA runtime {meta['runtime']})",
            f"- command: `{meta['command']}`"]


def compile_all(backend: Any, jobs: list[tuple[Any, dict]], target: Any) -> list[tuple[Any, str]]:
    """(artifact or None, compile error) per (problem, configuration), 16 compiles at a time (NVRTC releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    def build(job):
        problem, config = job
        try:
            return backend.compile(problem, config, target), ""
        except CompileFailed as e:
            return None, str(e)

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(build, jobs))


def num(x: float | None, digits: int) -> str:
    """A figure with `digits` decimals, or nothing when it was not measured."""
    return "" if x is None else f"{x:.{digits}f}"


def describe(config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def median_ms(ev: Evaluation) -> float | None:
    return summarize(ev.samples.times_ms).median if ev.ok and ev.samples else None


def write_report(results: list[dict], meta: dict, render: Callable[[list[dict], dict], str], output: Path,
                 json_path: Path | None) -> None:
    """The Markdown report (and the JSON with raw samples), rewritten after every problem."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(results, meta))
    if json_path:
        json_path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
