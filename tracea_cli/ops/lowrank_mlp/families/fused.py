"""The fused CUDA family: one kernel per configuration, `LowrankFused` of kernels/cuda/lowrank_mlp.cuh (T = x·U kept in
shared memory, then streamed through ·V chunk by chunk with the epilogue; fp16 and bf16 on mma.sync, fp32 as 3xTF32),
one block per block_m rows of x. Its space
and hand-picked configurations are in fused_space.py. Pure: no GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.launch import KernelStep, LaunchPlan
from tracea_cli.ops.lowrank_mlp.families import kernel_abi
from tracea_cli.ops.lowrank_mlp.families.fused_space import (
    FAMILY,
    applies,
    fused_space,
    hand_picked,
    tiling,
)
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

KERNEL = "lowrank_fused"


def fused_source(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration (what is compiled, hashed and exported)."""
    p = problem
    t = tiling(p, config)
    flag = {True: "true", False: "false"}
    args = [kernel_abi.ELEMENT[p.dtype], flag[p.layout == "nt"], f"tracea::Act::{kernel_abi.ACT[p.act]}",
            flag[p.bias], flag[p.residual], flag[p.intermediate == "fp32"], str(p.rank),
            *(str(int(config[k])) for k in ("block_m", "warps", "warps_n1", "block_k", "block_n", "warps_n2", "stages",
                                            "vec")),
            flag[bool(int(config["stage_y"]))]]
    lines = kernel_abi.header_lines(p, FAMILY, config_key(config)) + [
        f"using Fused = tracea::LowrankFused<{', '.join(args)}>;",
        f'static_assert(Fused::THREADS == {t.threads}, "block size differs from the launch description");',
        f'static_assert(Fused::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch description");',
        f'static_assert(Fused::R_PAD == {t.r_pad}, "padded rank differs from the space\'s");',
        f"extern \"C\" __global__ void __launch_bounds__(Fused::THREADS, {int(config['min_blocks'])}) "
        f"{KERNEL}(TRACEA_LOWRANK_PARAMS) {{ tracea::lowrank_fused<Fused>(TRACEA_LOWRANK_ARGS); }}",
    ]
    return "\n".join(lines) + "\n"


def fused_launch(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """One kernel: split_n blocks per block_m rows of x."""
    t = tiling(problem, config)
    bm = int(config["block_m"])
    return LaunchPlan(steps=(KernelStep(KERNEL, grid=(f"m/{bm}", int(config["split_n"]), 1), block=(t.threads, 1, 1),
                                        dynamic_smem_bytes=t.smem_bytes),),
                      params=kernel_abi.PARAMS, tile_m=bm, alignment_bytes=t.alignment_bytes,
                      family=FAMILY)


@dataclass(frozen=True)
class FusedFamily:
    """ops/base.Family for the fused kernel."""

    name: str = FAMILY
    backend: str = "cuda"

    def space(self, problem: LowrankMlpProblem, target: Target) -> SearchSpace | str:
        return applies(problem) or fused_space(problem, target)

    def template(self, problem: LowrankMlpProblem) -> str | None:
        return None if applies(problem) else kernel_abi.template(problem)

    def source(self, problem: LowrankMlpProblem, config: Mapping[str, Value]) -> str:
        return fused_source(problem, config)

    def launch(self, problem: LowrankMlpProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return fused_launch(problem, config)

    def args(self, problem: LowrankMlpProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return kernel_abi.kernel_args(problem, operands)

    def suggested(self, problem: LowrankMlpProblem, target: Target) -> list[dict[str, Value]]:
        return hand_picked(problem, target)[:3]

    def serves(self, built_for: LowrankMlpProblem, config: Mapping[str, Value],
               problem: LowrankMlpProblem) -> str | None:
        """The rank is a template parameter: a kernel serves its own rank only."""
        if problem.rank != built_for.rank:
            return f"the kernel is built for rank {built_for.rank}, not {problem.rank}"
        return None


FUSED = FusedFamily()
