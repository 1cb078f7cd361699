"""The lowrank-mlp operation as the registry serves it: options, families, baselines, inputs, reference, suites and
export."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Option, Tensor, find_epilogue, resolve_options
from tracea_cli.ops.lowrank_mlp import problem as lp
from tracea_cli.ops.lowrank_mlp.baselines import BASELINES
from tracea_cli.ops.lowrank_mlp.export.abi import ABI
from tracea_cli.ops.lowrank_mlp.families.fused import FUSED
from tracea_cli.ops.lowrank_mlp.families.numba import NUMBA
from tracea_cli.ops.lowrank_mlp.families.two_gemm import TWO_GEMM
from tracea_cli.ops.lowrank_mlp.graph import BINDING
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem
from tracea_cli.ops.lowrank_mlp.suites import suite


class LowrankMlpOp:
    name = lp.OP_NAME
    summary = "y = act(x·U·V + bias) (+ residual): a low-rank linear layer, the rank-r intermediate kept on chip."
    options = (
        Option("m", int, "Rows of x and y (tokens).", required=True, size=True),
        Option("d_in", int, "Columns of x (input features).", required=True, size=True),
        Option("rank", int, "The rank r: columns of T = x·U, at most min(d_in, d_out).", required=True, size=True),
        Option("d_out", int, "Columns of y (output features; default: d_in).", default_from="d_in", size=True),
        Option("dtype", str, " | ".join(lp.DTYPES) + " (fp64 on the cpu backend only).", default="fp32",
               choices=lp.DTYPES),
        Option("act", str, " | ".join(lp.ACTS) + ": the activation after the bias.", default="none", choices=lp.ACTS),
        Option("bias", bool, "Add a bias of d_out elements before the activation.", default=True),
        Option("residual", bool, "Add a residual of M x d_out elements after the activation.", default=False),
        Option("layout", str, "nn (U: d_in x r, V: r x d_out, row-major), or nt (U: r x d_in, V: d_out x r, as "
               "torch.nn.Linear stores weights).", default="nn", choices=lp.LAYOUTS),
        Option("intermediate", str, "fp32 | dtype: T kept in fp32, or rounded to the dtype before the second "
               "product (fp16, bf16; the same for fp32).", default="dtype", choices=lp.INTERMEDIATES),
    )
    epilogues = lp.EPILOGUES
    dtypes = {"cuda": ("fp32", "fp16", "bf16"), "cpu": ("fp32", "fp64")}
    # In order of preference: the fused family's suggestions come first where it applies.
    families = (FUSED, TWO_GEMM, NUMBA)
    baselines = BASELINES
    export = ABI
    graph = BINDING

    def problem(self, **values: Any) -> LowrankMlpProblem:
        """The problem for option values. `epilogue=NAME` ("bias_silu_residual"), as the Python API's graphs name
        the fused epilogue, sets bias, act and residual (given as well, they must agree with it)."""
        epilogue = values.pop("epilogue", None)
        if epilogue is not None:
            fused = find_epilogue(lp.EPILOGUES, epilogue)
            parts = {"bias": fused.bias, "act": fused.activation or "none", "residual": fused.residual}
            other = next((k for k, v in parts.items() if values.get(k) is not None and values[k] != v), None)
            if other is not None:
                raise UsageError(f"lowrank-mlp's epilogue {epilogue!r} and {other}={values[other]!r} disagree.",
                                 "In a graph, add the bias, activation and residual as nodes after the node; they "
                                 "fuse into it.")
            values.update(parts)
        return LowrankMlpProblem(**resolve_options(self.name, self.options, values))

    def from_key(self, dtype: str, key: Mapping[str, Any]) -> LowrankMlpProblem:
        return LowrankMlpProblem.from_key(dtype, key)

    def tensors(self, problem: LowrankMlpProblem) -> tuple[Tensor, ...]:
        return problem.tensors()

    def make_inputs(self, problem: LowrankMlpProblem, rng: Any) -> dict[str, Any]:
        return lp.make_inputs(problem, rng)

    def reference(self, problem: LowrankMlpProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return lp.reference(problem, inputs)

    def suite(self, name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[LowrankMlpProblem, ...]:
        return suite(name, backend, dtypes)


OP = LowrankMlpOp()
