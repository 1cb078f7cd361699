"""The CUDA GEMM backend `tracea tune` uses: every kernel family in one search space.

SIMT and mma.sync configurations (backends/cuda.py) and, on sm_90, the wgmma/TMA family (backends/cuda_hopper.py)
are joined with `space.UnionSpace`; compiling and evaluating go to the family's own backend. The baseline is
cuBLAS, as measured by the engine backend.
"""

from __future__ import annotations

from typing import Mapping

from tracea_cli.backends.base import Artifact, Evaluation
from tracea_cli.backends.cuda import CudaBackend
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import SearchSpace, UnionSpace, Value
from tracea_cli.target import Target
from tracea_cli.timing import TimingPolicy

WGMMA = "wgmma"


def _is_wgmma(config: Mapping[str, Value]) -> bool:
    return config.get("family") == WGMMA


def gemm_space(problem: GemmProblem, target: Target) -> SearchSpace | UnionSpace:
    """Every CUDA family that can run `problem` on `target`."""
    from tracea_cli.ops.gemm.cuda_space import gemm_space as engine_space
    from tracea_cli.ops.gemm.hopper_space import hopper_space

    engine = engine_space(problem, target)
    hopper = hopper_space(problem, target)
    return engine if hopper is None else UnionSpace((engine, hopper))


class CudaGemmBackend:
    """backends.base.Backend for GEMM on NVIDIA GPUs, all families."""

    name = "cuda"

    def __init__(self) -> None:
        from tracea_cli.backends.cuda_hopper import HopperBackend

        self._engine = CudaBackend()
        self._hopper = HopperBackend()

    def space(self, problem: GemmProblem, target: Target):
        return gemm_space(problem, target)

    def source_hash(self, problem: GemmProblem) -> str:
        from tracea_cli.backends.cuda import source_digest

        return source_digest(self._engine.source_hash(problem) + self._hopper.source_hash(problem))

    def compile(self, problem: GemmProblem, config: Mapping[str, Value], target: Target) -> Artifact:
        family = self._hopper if _is_wgmma(config) else self._engine
        return family.compile(problem, config, target)

    def evaluate(self, artifact: Artifact, problem: GemmProblem, target: Target, *, policy: TimingPolicy,
                 seed: int) -> Evaluation:
        family = self._hopper if _is_wgmma(artifact.config) else self._engine
        return family.evaluate(artifact, problem, target, policy=policy, seed=seed)  # on the target's device

    def baseline(self, problem: GemmProblem, target: Target, *, policy: TimingPolicy, seed: int) -> tuple[str, Evaluation]:
        return self._engine.baseline(problem, target, policy=policy, seed=seed)

    def suggested(self, problem: GemmProblem, target: Target) -> list[dict[str, Value]]:
        """Hand-picked starting points: the wgmma default where the family applies, then the engine's best guesses."""
        from tracea_cli.ops.gemm.cuda_space import hand_picked
        from tracea_cli.ops.gemm.hopper_space import default_config, hopper_space

        picks = []
        if hopper_space(problem, target) is not None:
            config = default_config(problem, target)
            if config:
                picks.append(dict(config))
        return picks + hand_picked(problem, target, limit=3)
