"""The GEMM search space for a target: dispatches to the backend's space module."""

from __future__ import annotations

from tracea_cli.errors import UsageError
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import SearchSpace
from tracea_cli.target import Target


def space_for(problem: GemmProblem, target: Target) -> SearchSpace:
    if target.backend == "cpu":
        from tracea_cli.ops.gemm.cpu_space import gemm_space
    elif target.backend == "cuda":
        from tracea_cli.backends.cuda_gemm import gemm_space
    else:
        raise UsageError(f"the {target.backend} backend has no gemm kernels yet.", "Use --backend cuda or cpu.")
    return gemm_space(problem, target)
