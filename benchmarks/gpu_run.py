"""Pieces the GPU benchmark scripts share: the run's provenance (date, device, versions, command), a configuration
and a median in one line each, compiling candidates in parallel, and writing the report after every problem (a run cut short keeps what it measured).
Not a script: `gemm_engine.py` and `gemm_small_m.py` import it (one candidate sweep between two baselines too)."""

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
    from tracea_cli.ops.gemm.families.engine import GENERATOR_VERSION  # the GEMM engine's (its reports print it)

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


def compiler(backend: Any, target: Any) -> Callable[[tuple[Any, dict]], tuple[Any, str]]:
    """A function that compiles one (problem, configuration): (artifact, "") or (None, why not): a compile error, or
    any other exception by name (a bug must not stop the other candidates)."""
    def build(job: tuple[Any, dict]) -> tuple[Any, str]:
        problem, config = job
        try:
            return backend.compile(problem, config, target), ""
        except CompileFailed as e:
            return None, str(e)
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"

    return build


def compile_all(backend: Any, jobs: list[tuple[Any, dict]], target: Any) -> list[tuple[Any, str]]:
    """(artifact or None, compile error) per (problem, configuration), 16 compiles at a time (NVRTC releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(compiler(backend, target), jobs))


def num(x: float | None, digits: int) -> str:
    """A figure with `digits` decimals, or nothing when it was not measured."""
    return "" if x is None else f"{x:.{digits}f}"


def describe(config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def median_ms(ev: Evaluation) -> float | None:
    return summarize(ev.samples.times_ms).median if ev.ok and ev.samples else None


def resources_of(artifact: Any) -> dict[str, Any]:
    """Registers, spills, shared memory and block size of a compiled candidate, as the reports show them: those of the
    plan's main kernel (LaunchPlan.main_kernel: the product itself, not a staging kernel or split-K's reduction)."""
    r = artifact.resources
    main_step = artifact.plan.main_kernel
    main = r.get("kernels", {}).get(main_step.name, r) if main_step else r
    return {"registers": main.get("registers"), "spill_bytes": main.get("spill_store_bytes"),
            "smem_bytes": r.get("dynamic_shared_bytes", r.get("shared_bytes")),
            "threads": main_step.block[0] if main_step else None}


def measure_between_baselines(backend: Any, problem: Any, target: Any, configs: list[dict],
                              built: list[tuple[Any, str]], *, policy: Any, log: Callable[[str], None]) -> dict:
    """cuBLAS, then every compiled candidate (checked before it is timed), then cuBLAS again. Returns the baseline's
    name, both medians and samples and statuses, `base` (the faster median), and one row per candidate."""
    name, before = backend.baseline(problem, target, policy=policy, seed=1)
    log(f"  {name}: {before.status.value} {median_ms(before)} ms {before.reason}")
    rows = []
    for config, (artifact, error) in zip(configs, built):
        if artifact is None:
            rows.append({"config": config, "status": "compile_error", "reason": error[:300]})
            log(f"  {describe(config)}: compile_error {error[:200]}")
            continue
        ev = backend.evaluate(artifact, problem, target, policy=policy, seed=1)
        med = median_ms(ev)
        s = summarize(ev.samples.times_ms) if med else None
        row = {"config": config, "status": ev.status.value, "reason": ev.reason, "rel_error": ev.rel_error,
               "median_ms": med, "cv": s.cv if s else None, "n": s.n if s else 0,
               "tflops": problem.flops / (med * 1e-3) / 1e12 if med else None,
               "samples_ms": list(ev.samples.times_ms) if ev.samples else [],
               **resources_of(artifact), "compile_s": artifact.compile_s}
        rows.append(row)
        log(f"  {describe(config)}: {ev.status.value} {med and round(med, 4)} ms "
            f"{row['tflops'] and round(row['tflops'], 1)} TFLOP/s err {ev.rel_error} {ev.reason[:200]}")
    _, after = backend.baseline(problem, target, policy=policy, seed=1)
    log(f"  {name} again: {after.status.value} {median_ms(after)} ms")
    meds = [m for m in (median_ms(before), median_ms(after)) if m]
    return {"baseline": name, "baseline_ms": [median_ms(before), median_ms(after)],
            "baseline_samples_ms": [list(e.samples.times_ms) if e.samples else [] for e in (before, after)],
            "baseline_status": [e.status.value + (f": {e.reason}" if e.reason else "") for e in (before, after)],
            "base": min(meds) if meds else None, "rows": rows}


def write_report(results: list[dict], meta: dict, render: Callable[[list[dict], dict], str], output: Path,
                 json_path: Path | None) -> None:
    """The Markdown report (and the JSON with raw samples), rewritten after every problem."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(results, meta))
    if json_path:
        json_path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
