"""The CPU runtime: a family's numba module (its `source`) compiled once per process and kept on disk, its entry
point called as the launch plan's CallStep says, checked, then timed on the host clock. It knows no op.

Every module gets `PROLOGUE` in front: numba, numpy as np, njit and prange, the vector vocabulary of
backends/numba_simd.py and `CACHE` (whether numba may keep the machine code beside the module file). With a kernel
cache folder (TRACEA_KERNEL_CACHE_DIR, else the tuning cache folder's numba/), the module is written there under a
name made from its text and numba's version, so that a later process loads the machine code in a fraction of a second
instead of compiling for seconds, and a changed kernel or numba never loads stale code. Without one, or where the
folder cannot be written, it is compiled in memory (its assembly can then be inspected).

numba is imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

import numpy as np

from tracea_cli.backends.base import Artifact, Evaluation, Status, failure
from tracea_cli.backends.checked import Device, run_checked
from tracea_cli.ops.launch import CallStep
from tracea_cli.target import Target
from tracea_cli.timing import HostClock, TimingPolicy

PROLOGUE = """import numba
import numpy as np
from numba import njit, prange
from tracea_cli.backends.numba_simd import vadd, vfma, vload, vprefetch, vsilu, vsplat, vstore, vzero
CACHE = {cache}
"""


def kernel_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """Where compiled CPU kernels are kept between processes: TRACEA_KERNEL_CACHE_DIR, else the tuning cache
    folder's numba/ (Settings.cache_dir); None ("off") compiles in memory in every process. Read from the
    environment, which tuning workers inherit from the command that spawned them."""
    from tracea_cli.config import Settings

    env = os.environ if env is None else env
    value = env.get("TRACEA_KERNEL_CACHE_DIR", "").strip()
    if value.lower() in ("off", "0", "none"):
        return None
    return Path(value).expanduser() if value else Settings.from_env(env).cache_dir / "numba"


def module_text(source: str, *, cache: bool) -> str:
    return PROLOGUE.format(cache=bool(cache)) + source


def module_path(source: str, cache_dir: Path) -> Path:
    """Where a module lives under `cache_dir`: its name carries a hash of its text and numba's version."""
    import numba

    digest = hashlib.sha256(module_text(source, cache=True).encode() + numba.__version__.encode()).hexdigest()
    return Path(cache_dir) / f"tracea_kernel_{digest[:16]}.py"


def _load_cached_module(source: str, cache_dir: Path) -> tuple[ModuleType, Path] | None:
    """Write (once) and import the module under `cache_dir`; None when the folder cannot be written."""
    path = module_path(source, cache_dir)
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(module_text(source, cache=True))
            os.replace(tmp, path)  # atomic: concurrent workers never import half a file
        if not os.access(path.parent, os.W_OK):  # numba could not store its cache beside it
            return None
    except OSError:
        return None
    name = f"_tracea_cpu_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba finds a cached function's module by name when it loads the cache
    spec.loader.exec_module(module)
    return module, path


@dataclass(frozen=True)
class CompiledEntry:
    """One entry point of a module, compiled for its signature. Calling it runs the function (no other argument
    types: they would fail loudly instead of compiling a slow variant)."""

    dispatcher: Callable
    namespace: Mapping[str, Any]
    compile_s: float  # seconds this process took to get it (compiling, or loading numba's on-disk cache)
    module_path: str | None  # the module under the kernel cache folder; None: compiled in memory

    def assembly(self, name: str | None = None) -> str:
        """The host assembly of the entry point (or of the module's function `name`), as numba's inspect_asm shows."""
        fn = self.dispatcher if name is None else self.namespace[name]
        return "\n".join(fn.inspect_asm().values())


_entries: dict[tuple[str, str, str, bool], CompiledEntry] = {}  # (source digest, entry, signature, on disk)
_lock = threading.Lock()


def compiled_entry(source: str, step: CallStep, cache_dir: Path | str | None = None) -> CompiledEntry:
    """`step`'s entry point of the module `source`, compiled on first use and reused for the rest of the process."""
    key = (hashlib.sha256(source.encode()).hexdigest(), step.name, step.signature, cache_dir is not None)
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            t0 = time.perf_counter()
            loaded = _load_cached_module(source, Path(cache_dir)) if cache_dir is not None else None
            if loaded is not None:
                namespace, path = vars(loaded[0]), str(loaded[1])
            else:
                namespace, path = {"__name__": f"_tracea_cpu_{key[0][:16]}"}, None
                exec(compile(module_text(source, cache=False), f"<tracea kernel {key[0][:16]}>", "exec"), namespace)
            dispatcher = namespace[step.name]
            dispatcher.compile(step.signature)
            dispatcher.disable_compile()
            entry = _entries[key] = CompiledEntry(dispatcher, namespace, time.perf_counter() - t0, path)
        return entry


def is_compiled(source: str, step: CallStep) -> bool:
    digest = hashlib.sha256(source.encode()).hexdigest()
    with _lock:
        return any(k[:3] == (digest, step.name, step.signature) for k in _entries)


def call(entry: CompiledEntry, step: CallStep, values: Mapping[str, Any]) -> None:
    """Run the entry point on `step.threads` threads with the parameters from `values` (the family's arguments), the
    step's own values and `threads`."""
    import numba

    numba.set_num_threads(step.threads)
    known = {**step.values, **values, "threads": numba.get_num_threads()}
    entry.dispatcher(*(known[name] for name in step.params))


def _rng(seed: int) -> np.random.Generator:
    """The input generator for any integer seed (the tuner's baseline job uses -1; numpy wants seeds >= 0)."""
    return np.random.default_rng(seed % 2**64)


HOST = Device(xp=np, rng=_rng, synchronize=lambda: None, clock=lambda stream: HostClock())


def evaluate(op: Any, family: Any, problem: Any, artifact: Artifact, target: Target, *, seed: int,
             policy: TimingPolicy | None) -> Evaluation:
    """Compile (first use in this process), run once on fresh inputs into NaN-poisoned outputs, check against the
    float64 reference, then time. compile_s is the time numba spent here (0 when already compiled)."""
    step = next(s for s in artifact.plan.steps if isinstance(s, CallStep))
    try:
        fresh = not is_compiled(artifact.source, step)
        entry = compiled_entry(artifact.source, step, kernel_cache_dir())
        compile_s = entry.compile_s if fresh else 0.0
    except Exception as e:  # numba's typing and lowering errors, bad configuration values
        return failure(Status.COMPILE_ERROR, e)
    import numba

    if step.threads > numba.config.NUMBA_NUM_THREADS:
        return Evaluation(Status.LAUNCH_ERROR, compile_s=compile_s,
                          reason=f"threads={step.threads} exceeds numba's pool of {numba.config.NUMBA_NUM_THREADS}")

    def launcher(operands: Mapping[str, Any]) -> Callable[[], None]:
        values = family.args(problem, operands)
        return lambda: call(entry, step, values)

    return run_checked(op, problem, HOST, launcher, seed=seed, policy=policy, compile_s=compile_s)


def launcher(family: Any, problem: Any, artifact: Artifact, operands: Mapping[str, Any], *,
             stream: int | None = None) -> Callable[[], None]:
    """The artifact's entry point over the caller's host arrays (compiled, or loaded from the kernel cache, once)."""
    step = next(s for s in artifact.plan.steps if isinstance(s, CallStep))
    entry = compiled_entry(artifact.source, step, kernel_cache_dir())
    values = family.args(problem, operands)
    return lambda: call(entry, step, values)


def evaluate_baseline(op: Any, baseline: Any, problem: Any, target: Target, *, seed: int,
                      policy: TimingPolicy | None) -> tuple[str, Evaluation]:
    """A library baseline (ops/base.Baseline) on the host, on the inputs `evaluate` makes from the same seed,
    checked and timed the same way: (what ran, evaluation)."""
    prepared: list[Any] = []

    def launcher(operands: Mapping[str, Any]) -> Any:
        prepared.append(baseline.prepare(problem, operands))
        return prepared[0]

    ev = run_checked(op, problem, HOST, launcher, seed=seed, policy=policy)
    return (prepared[0].label if prepared else baseline.name), ev
