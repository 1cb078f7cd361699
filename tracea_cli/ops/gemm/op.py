"""The GEMM operation as the registry serves it: options, families, baselines, inputs, reference, suites, export."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.ops.base import Option, Tensor, resolve_options
from tracea_cli.ops.gemm import problem as gp
from tracea_cli.ops.gemm.baselines import BASELINES
from tracea_cli.ops.gemm.export.abi import ABI
from tracea_cli.ops.gemm.families.engine import MMA, SIMT
from tracea_cli.ops.gemm.families.numba import NUMBA
from tracea_cli.ops.gemm.families.wgmma import WGMMA
from tracea_cli.ops.gemm.graph import BINDING
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.gemm.suites import suite

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp64")


class GemmOp:
    name = "gemm"
    summary = "C = epilogue(A·B), layouts nn and nt, with a fused bias, activation and residual."
    options = (
        Option("m", int, "Rows of A and C.", required=True, size=True),
        Option("n", int, "Columns of B and C (default: M).", default_from="m", size=True),
        Option("k", int, "The reduction size (default: M).", default_from="m", size=True),
        Option("dtype", str, " | ".join(DTYPES) + ".", default="fp32", choices=DTYPES),
        Option("layout", str, "nn, or nt (B given as N x K, as torch.nn.Linear stores weights).", default="nn",
               choices=gp.LAYOUTS),
        Option("epilogue", str, " | ".join(gp.EPILOGUE_NAMES) + ".", default="none", choices=gp.EPILOGUE_NAMES),
    )
    epilogues = gp.EPILOGUES
    dtypes = {"cuda": DTYPES, "cpu": ("fp32", "fp64")}
    # In order of preference: the suggestions of the first family come first (the wgmma default where it applies).
    families = (WGMMA, MMA, SIMT, NUMBA)
    baselines = BASELINES
    export = ABI
    graph = BINDING

    def problem(self, **values: Any) -> GemmProblem:
        return GemmProblem(**resolve_options(self.name, self.options, values))

    def from_key(self, dtype: str, key: Mapping[str, Any]) -> GemmProblem:
        return GemmProblem.from_key(dtype, key)

    def tensors(self, problem: GemmProblem) -> tuple[Tensor, ...]:
        return problem.tensors()

    def make_inputs(self, problem: GemmProblem, rng: Any) -> dict[str, Any]:
        return gp.make_inputs(problem, rng)

    def reference(self, problem: GemmProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return gp.reference(problem, inputs)

    def suite(self, name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[GemmProblem, ...]:
        return suite(name, backend, dtypes)


OP = GemmOp()
