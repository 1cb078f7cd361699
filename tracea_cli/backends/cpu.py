"""The CPU backend for GEMM: numba kernels (backends/cpu_gemm_kernels.py), checked, then timed on the host clock.

`CpuBackend.compile` only validates a configuration and describes it: numba compiles in the evaluating process, on
first use of a kernel spec, and `evaluate` records how long that took. `evaluate` runs the kernel on fresh random
inputs with the output poisoned (NaN), checks it against the float64 reference, and only then times it with the
shared harness; kernel faults come back as typed evaluations, never as exceptions. `baseline` does the same for
numpy.matmul (OpenBLAS here) followed by the epilogue in numpy.

numba is imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from tracea_cli.backends.base import Artifact, CompileFailed, Evaluation, Status
from tracea_cli.ops.gemm.cpu_space import DTYPES, gemm_space
from tracea_cli.ops.gemm.problem import GemmInputs, GemmProblem, make_inputs, reference
from tracea_cli.ops.verify import check
from tracea_cli.space import Config, SearchSpace, Value
from tracea_cli.target import Target
from tracea_cli.timing import HostClock, TimingPolicy, measure

if TYPE_CHECKING:
    from tracea_cli.backends.cpu_gemm_kernels import KernelSpec, RunOptions

KERNEL_MODULE = "cpu_gemm_kernels.py"
_NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64}


@lru_cache(maxsize=1)
def kernel_source_hash() -> str:
    """sha256 of the kernel module's text (it generates every micro-kernel): part of every CPU cache key."""
    text = resources.files("tracea_cli.backends").joinpath(KERNEL_MODULE).read_bytes()
    return hashlib.sha256(text).hexdigest()


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


def spec_and_options(problem: GemmProblem, config: Mapping[str, Value]) -> tuple["KernelSpec", "RunOptions"]:
    """Split a configuration into its compiled part and its run-time part."""
    from tracea_cli.backends.cpu_gemm_kernels import KernelSpec, RunOptions

    spec = KernelSpec(problem.dtype, int(config["mr"]), int(config["nr"]), str(config["parallel"]))
    options = RunOptions(int(config["mc"]), int(config["kc"]), int(config["nc"]), bool(config["pack_a"]),
                         int(config["threads"]), problem.layout, problem.epilogue)
    return spec, options


def host_arrays(problem: GemmProblem, inputs: GemmInputs) -> dict[str, np.ndarray | None]:
    """The inputs as C-contiguous arrays of the problem's dtype (the values are already representable in it)."""
    dt = _NUMPY_DTYPES[problem.dtype]

    def conv(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else np.ascontiguousarray(x, dtype=dt)

    return {"a": conv(inputs.a), "b": conv(inputs.b), "bias": conv(inputs.bias), "residual": conv(inputs.residual)}


def run_gemm(problem: GemmProblem, config: Mapping[str, Value], inputs: GemmInputs) -> np.ndarray:
    """Compute the problem with one configuration's kernel into a freshly NaN-poisoned output, and return it.
    Compiles the kernel on first use. Raises whatever the kernel raises."""
    spec, options = spec_and_options(problem, config)
    from tracea_cli.backends.cpu_gemm_kernels import compiled_gemm

    kernel = compiled_gemm(spec, kernel_cache_dir())
    arrays = host_arrays(problem, inputs)
    out = np.full((problem.m, problem.n), np.nan, dtype=_NUMPY_DTYPES[problem.dtype])
    kernel(arrays["a"], arrays["b"], out, options, bias=arrays["bias"], residual=arrays["residual"])
    return out


def numpy_gemm(problem: GemmProblem, a: np.ndarray, b: np.ndarray, out: np.ndarray,
               bias: np.ndarray | None, residual: np.ndarray | None) -> None:
    """The baseline: numpy.matmul into `out`, then the epilogue with numpy's element-wise operations, in place."""
    np.matmul(a, b if problem.layout == "nn" else b.T, out=out)
    if problem.has_bias:
        out += bias
    if problem.epilogue == "bias_relu":
        np.maximum(out, 0, out=out)
    elif problem.epilogue == "bias_silu":
        out /= 1 + np.exp(-out)
    elif problem.epilogue == "bias_gelu":
        from scipy.special import erf  # numpy has no erf

        out *= 0.5 * (1 + erf(out * np.sqrt(0.5)))
    if problem.has_residual:
        out += residual


class CpuBackend:
    """GEMM on the host CPU (fp32, fp64) with numba kernels. See the module docstring."""

    name = "cpu"

    def space(self, problem: GemmProblem, target: Target) -> SearchSpace:
        return gemm_space(problem, target)

    def source_hash(self, problem: GemmProblem) -> str:
        return kernel_source_hash()

    def compile(self, problem: GemmProblem, config: Mapping[str, Value], target: Target) -> Artifact:
        """Validate and describe a configuration (binary=None: numba compiles where it runs). Raises CompileFailed
        for a configuration outside the space, with the space's reason."""
        if problem.dtype not in DTYPES:
            raise CompileFailed(f"the cpu backend does fp32 and fp64, not {problem.dtype}")
        reason = gemm_space(problem, target).why_invalid(config)
        if reason:
            raise CompileFailed(f"configuration not in the CPU space: {reason}")
        from tracea_cli.backends.cpu_gemm_kernels import micro_kernel_source

        spec, options = spec_and_options(problem, config)
        return Artifact(
            config=dict(config),
            kernel_name=spec.name,
            binary=None,
            source=micro_kernel_source(spec.mr, spec.nr, spec.lanes),
            launch={"mc": options.mc, "kc": options.kc, "nc": options.nc, "pack_a": options.pack_a,
                    "threads": options.threads, "parallel": spec.parallel, "layout": options.layout,
                    "epilogue": options.epilogue},
        )

    def evaluate(self, artifact: Artifact, problem: GemmProblem, target: Target, *, policy: TimingPolicy,
                 seed: int) -> Evaluation:
        """Compile (first use in this process), run once on fresh inputs into a NaN-poisoned output, check against
        the float64 reference, then time. compile_s is the time numba spent here (0 when already compiled)."""
        try:
            spec, options = spec_and_options(problem, artifact.config)
            from tracea_cli.backends.cpu_gemm_kernels import cached_specs, compiled_gemm

            fresh = spec not in cached_specs()
            t0 = time.perf_counter()
            kernel = compiled_gemm(spec, kernel_cache_dir())
            compile_s = time.perf_counter() - t0 if fresh else 0.0
        except Exception as e:  # numba's typing and lowering errors, bad configuration values
            return Evaluation(Status.COMPILE_ERROR, reason=_brief(e))
        import numba

        if options.threads > numba.config.NUMBA_NUM_THREADS:
            return Evaluation(Status.LAUNCH_ERROR, compile_s=compile_s,
                              reason=f"threads={options.threads} exceeds numba's pool of {numba.config.NUMBA_NUM_THREADS}")
        inputs = make_inputs(problem, _rng(seed))
        arrays = host_arrays(problem, inputs)
        out = np.full((problem.m, problem.n), np.nan, dtype=_NUMPY_DTYPES[problem.dtype])

        def run() -> None:
            kernel(arrays["a"], arrays["b"], out, options, bias=arrays["bias"], residual=arrays["residual"])

        return _check_then_time(run, out, problem, inputs, policy, compile_s)

    def suggested(self, problem: GemmProblem, target: Target) -> list[Config]:
        """The tuner's first proposals: the two best hand-picked configurations (they share compiled kernels)."""
        from tracea_cli.ops.gemm.cpu_space import hand_picked

        return hand_picked(problem, target)[:2]

    def baseline(self, problem: GemmProblem, target: Target, *, policy: TimingPolicy,
                 seed: int) -> tuple[str, Evaluation]:
        """numpy.matmul (its BLAS, with its own threads) and the epilogue in numpy, on the inputs `evaluate` makes
        from the same seed, checked and timed the same way."""
        inputs = make_inputs(problem, _rng(seed))
        arrays = host_arrays(problem, inputs)
        out = np.full((problem.m, problem.n), np.nan, dtype=_NUMPY_DTYPES[problem.dtype])

        def run() -> None:
            numpy_gemm(problem, arrays["a"], arrays["b"], out, arrays["bias"], arrays["residual"])

        return "numpy", _check_then_time(run, out, problem, inputs, policy, 0.0)


def _rng(seed: int) -> np.random.Generator:
    """The input generator for any integer seed (the tuner's baseline job uses -1; numpy wants seeds >= 0)."""
    return np.random.default_rng(seed % 2**64)


def _check_then_time(run: Callable[[], None], out: np.ndarray, problem: GemmProblem, inputs: GemmInputs,
                     policy: TimingPolicy, compile_s: float) -> Evaluation:
    try:
        run()
    except Exception as e:
        return Evaluation(Status.LAUNCH_ERROR, reason=_brief(e), compile_s=compile_s)
    verdict = check(out.astype(np.float64), reference(problem, inputs), problem.dtype)
    if not verdict.ok:
        return Evaluation(Status.WRONG_RESULT, reason=verdict.reason, rel_error=verdict.rel_error, compile_s=compile_s)
    try:
        samples = measure(run, clock=HostClock(), policy=policy)
    except Exception as e:
        return Evaluation(Status.LAUNCH_ERROR, reason=f"while timing: {_brief(e)}", compile_s=compile_s)
    return Evaluation(Status.OK, samples=samples, rel_error=verdict.rel_error, compile_s=compile_s)


def _brief(error: BaseException, limit: int = 600) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

