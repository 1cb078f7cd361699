"""A minimal op from outside tracea_cli/, registered through the `tracea.ops` entry-point group: Y = alpha·X + Z.

It proves the op interface is enough: a problem, one CPU family (a numba module with a two-parameter space: the
chunk each thread takes and the threads), a numpy baseline and bench suite rows; nothing under tracea_cli/ names it.
tests/plugin/test_plugin_op.py installs it (a dist-info folder on PYTHONPATH) and drives the real CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Baseline, BaselineRun, Option, Tensor, resolve_options
from tracea_cli.ops.dtypes import array_module, get_dtype, representable
from tracea_cli.ops.launch import CallStep, LaunchPlan
from tracea_cli.space import Param, SearchSpace

DTYPES = ("fp32", "fp64")
_NUMBA = {"fp32": "float32", "fp64": "float64"}


@dataclass(frozen=True)
class AxpyProblem:
    n: int
    alpha: float = 2.0
    dtype: str = "fp32"
    op: str = "axpy"

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n <= 0:
            raise UsageError(f"n must be a positive whole number, got {self.n!r}.")
        get_dtype(self.dtype)

    def key(self) -> dict[str, Any]:
        return {"n": self.n, "alpha": float(self.alpha)}

    def sizes(self) -> dict[str, int]:
        return {"n": self.n}

    @property
    def label(self) -> str:
        return f"axpy {self.n} {self.dtype} alpha={self.alpha:g}"

    @property
    def flops(self) -> int:
        return 2 * self.n

    @property
    def bytes(self) -> int:
        return 3 * self.n * get_dtype(self.dtype).storage_bytes


MODULE = '''
@njit(parallel=True, cache=CACHE)
def axpy(x, z, y, alpha, chunk, threads):
    """y = alpha * x + z, `chunk` elements per parallel iteration."""
    n = x.shape[0]
    for c in prange((n + chunk - 1) // chunk):
        for i in range(c * chunk, min(c * chunk + chunk, n)):
            y[i] = alpha * x[i] + z[i]
'''


@dataclass(frozen=True)
class AxpyFamily:
    name: str = "numba"
    backend: str = "cpu"

    def space(self, problem: AxpyProblem, target: Any) -> SearchSpace | str:
        if problem.dtype not in DTYPES:
            return f"axpy runs fp32 and fp64, not {problem.dtype}"
        threads = tuple(sorted({1, max(1, target.threads or 1)}))
        def every_thread_has_a_chunk(c: Mapping[str, Any]) -> str | None:
            if c["threads"] > 1 and problem.n <= c["chunk"]:
                return f"chunk={c['chunk']} covers all {problem.n} elements: threads={c['threads']} would idle"
            return None

        return SearchSpace(params=(Param("chunk", (1024, 8192, 65536)), Param("threads", threads)),
                           rules=(every_thread_has_a_chunk,))

    def template(self, problem: AxpyProblem) -> str | None:
        return Path(__file__).read_text() if problem.dtype in DTYPES else None

    def source(self, problem: AxpyProblem, config: Mapping[str, Any]) -> str:
        return MODULE

    def launch(self, problem: AxpyProblem, config: Mapping[str, Any]) -> LaunchPlan:
        t = _NUMBA[problem.dtype]
        signature = f"void({t}[::1], {t}[::1], {t}[::1], float64, intp, intp)"
        step = CallStep("axpy", signature, ("X", "Z", "Y", "alpha", "chunk", "threads"), {"chunk": int(config["chunk"])},
                        int(config["threads"]))
        return LaunchPlan(steps=(step,), family=self.name)

    def args(self, problem: AxpyProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return {"X": operands["X"], "Z": operands["Z"], "Y": operands["Y"], "alpha": float(problem.alpha)}

    def suggested(self, problem: AxpyProblem, target: Any) -> list[dict[str, Any]]:
        return [{"chunk": 8192, "threads": 1}]


def _numpy(problem: AxpyProblem, operands: Mapping[str, Any]) -> BaselineRun:
    x, z, y = operands["X"], operands["Z"], operands["Y"]

    def run() -> None:
        np.multiply(x, problem.alpha, out=y)
        np.add(y, z, out=y)

    return BaselineRun("numpy", run)


class AxpyOp:
    name = "axpy"
    summary = "Y = alpha·X + Z (a test plug-in)."
    options = (
        Option("n", int, "Elements.", required=True, size=True),
        Option("alpha", float, "The scale of X.", default=2.0),
        Option("dtype", str, "fp32 | fp64.", default="fp32", choices=DTYPES),
    )
    epilogues = ()
    dtypes = {"cpu": DTYPES}
    families = (AxpyFamily(),)
    baselines = (Baseline("numpy", ("cpu",), _numpy, default=True),)
    export = None

    def problem(self, **values: Any) -> AxpyProblem:
        return AxpyProblem(**resolve_options(self.name, self.options, values))

    def from_key(self, dtype: str, key: Mapping[str, Any]) -> AxpyProblem:
        return AxpyProblem(key["n"], key["alpha"], dtype)

    def tensors(self, problem: AxpyProblem) -> tuple[Tensor, ...]:
        return (Tensor("X", (problem.n,)), Tensor("Z", (problem.n,)), Tensor("Y", (problem.n,), output=True))

    def make_inputs(self, problem: AxpyProblem, rng: Any) -> dict[str, Any]:
        return {name: representable(rng.uniform(-1.0, 1.0, size=problem.n), problem.dtype) for name in ("X", "Z")}

    def reference(self, problem: AxpyProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
        xp = array_module(inputs["X"])
        return {"Y": problem.alpha * xp.asarray(inputs["X"], dtype=xp.float64) + xp.asarray(inputs["Z"], dtype=xp.float64)}

    def suite(self, name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[AxpyProblem, ...]:
        if backend != "cpu" or name not in ("quick", "default", "axpy"):
            return ()
        return tuple(AxpyProblem(n, dtype=d) for n in (1 << 16, 1 << 20) for d in DTYPES if d in dtypes)


OP = AxpyOp()
