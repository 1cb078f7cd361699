"""The conv2d operation as the registry serves it: options, families, baselines, inputs, reference, suites."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.ops.base import Option, Tensor, resolve_options
from tracea_cli.ops.conv2d import problem as cp
from tracea_cli.ops.conv2d.baselines import BASELINES
from tracea_cli.ops.conv2d.export.abi import ABI
from tracea_cli.ops.conv2d.families.implicit_gemm import MMA, SIMT
from tracea_cli.ops.conv2d.families.numba import NUMBA
from tracea_cli.ops.conv2d.families.wgmma import WGMMA
from tracea_cli.ops.conv2d.graph import BINDING
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.conv2d.suites import suite

#: what a problem may name; each backend runs some of them (`dtypes` below)
DTYPES = ("fp32", "fp64", "tf32", "fp16", "bf16")
_PAIRS = ("stride", "pad", "dilation")  # both axes at once; the per-axis options take their default from these


def _pair(name: str, help: str, default: int) -> tuple[Option, ...]:
    return (Option(name, int, f"{help} along both axes.", default=default, key=False),
            Option(f"{name}_h", int, f"{help} along H (default: --{name}).", default_from=name),
            Option(f"{name}_w", int, f"{help} along W (default: --{name}).", default_from=name))


class Conv2dOp:
    name = "conv2d"
    summary = "Y = epilogue(conv2d(X, W)): NHWC activations, KRSC filters, stride/padding/dilation, fused epilogue."
    options = (
        Option("n", int, "Images in the batch.", default=1, size=True),
        Option("h", int, "Input height.", required=True, size=True),
        Option("w", int, "Input width (default: H).", default_from="h", size=True),
        Option("c", int, "Input channels.", required=True, size=True),
        Option("k", int, "Output channels (filters).", required=True, size=True),
        Option("r", int, "Filter height.", required=True, size=True),
        Option("s", int, "Filter width (default: R).", default_from="r", size=True),
        *_pair("stride", "Stride", 1),
        *_pair("pad", "Zero padding", 0),
        *_pair("dilation", "Dilation", 1),
        Option("groups", int, "Groups; only 1 (dense convolution).", default=1, key=False),
        Option("dtype", str, " | ".join(DTYPES) + " (cuda: fp32, tf32, fp16, bf16; cpu: fp32, fp64).", default="fp32",
               choices=DTYPES),
        Option("epilogue", str, " | ".join(cp.EPILOGUE_NAMES) + ".", default="none", choices=cp.EPILOGUE_NAMES),
    )
    epilogues = cp.EPILOGUES
    dtypes = {"cuda": ("fp32", "tf32", "fp16", "bf16"), "cpu": ("fp32", "fp64")}
    # In order of preference: the suggestions of the first family come first (wgmma's where it applies: sm_90,
    # convolutions that are a GEMM).
    families = (WGMMA, MMA, SIMT, NUMBA)
    baselines = BASELINES
    export = ABI
    graph = BINDING

    def problem(self, **values: Any) -> Conv2dProblem:
        resolved = resolve_options(self.name, self.options, values)
        return Conv2dProblem(**{k: v for k, v in resolved.items() if k not in _PAIRS})

    def from_key(self, dtype: str, key: Mapping[str, Any]) -> Conv2dProblem:
        return Conv2dProblem.from_key(dtype, key)

    def tensors(self, problem: Conv2dProblem) -> tuple[Tensor, ...]:
        return problem.tensors()

    def make_inputs(self, problem: Conv2dProblem, rng: Any) -> dict[str, Any]:
        return cp.make_inputs(problem, rng)

    def reference(self, problem: Conv2dProblem, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return cp.reference(problem, inputs)

    def suite(self, name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[Conv2dProblem, ...]:
        return suite(name, backend, dtypes)


OP = Conv2dOp()
