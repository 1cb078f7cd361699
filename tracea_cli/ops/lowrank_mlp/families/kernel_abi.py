"""What the CUDA families of lowrank-mlp share: the kernels' parameters (TRACEA_LOWRANK_PARAMS in
kernels/cuda/lowrank_mlp.cuh), the template text they instantiate, and the values the parameters take.

Grid rules read the sizes "M" (rows of x), "N" (d_out) and "K" (d_in); "R" is the rank. "T" and "ldt" are the
two-GEMM family's scratch for the intermediate (placed by the runtime from the plan's `scratch`); the fused kernel
takes them as null and 0.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem, check_operands
from tracea_cli.resources import kernel_translation_unit

GENERATOR_VERSION = 1  # bump when the text the families generate around the template changes
HEADER = "cuda/lowrank_mlp.cuh"
PARAMS = ("x", "U", "V", "bias", "residual", "y", "T", "M", "K", "R", "N", "ldt")  # TRACEA_LOWRANK_PARAMS
ELEMENT = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}
ACT = {"none": "None", "relu": "Relu", "silu": "Silu", "gelu": "Gelu"}


@functools.lru_cache(maxsize=None)
def template_text() -> str:
    """kernels/cuda/lowrank_mlp.cuh with the GEMM engine's headers pasted in: one translation unit."""
    return kernel_translation_unit(HEADER)


def template(problem: LowrankMlpProblem) -> str:
    """What a CUDA family's kernels for `problem` are generated from (hashed into the cache key)."""
    return f"generator {GENERATOR_VERSION}\n{template_text()}"


def header_lines(problem: LowrankMlpProblem, family: str, key: str) -> list[str]:
    p = problem
    return [f"// Tracea CUDA lowrank-mlp, {family} family ({p.dtype}, layout {p.layout}, epilogue {p.epilogue}, "
            f"intermediate {p.intermediate}, rank {p.rank})", f"// configuration {key}", template_text()]


def kernel_args(problem: LowrankMlpProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The values of TRACEA_LOWRANK_PARAMS (T and ldt are the plan's scratch where it has one) and the sizes grid
    rules read."""
    check_operands(problem, operands)
    return {"x": operands["x"], "U": operands["U"], "V": operands["V"], "bias": operands.get("bias"),
            "residual": operands.get("residual"), "y": operands["y"], "T": None, "M": problem.m, "K": problem.d_in,
            "R": problem.rank, "N": problem.d_out, "ldt": 0}
