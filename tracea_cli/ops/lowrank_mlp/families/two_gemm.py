"""The two-GEMM CUDA family: `lowrank_xu` (T = x·U into scratch) then `lowrank_tv` (y = epilogue(T·V)), each an
instantiation of the GEMM engine's templates (MmaGemm for fp16 and bf16, SimtGemm for fp32) called through the views
of kernels/cuda/lowrank_mlp.cuh; the epilogue is fused into the second GEMM's store. T lies in the workspace as the
plan's scratch (M x rank, rows padded to 16 bytes). Its space and hand-picked configurations are in
two_gemm_space.py. Pure: no GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.families.engine_space import tiling
from tracea_cli.ops.launch import SCRATCH_ALIGN_BYTES, KernelStep, LaunchPlan, Scratch
from tracea_cli.ops.lowrank_mlp.families import kernel_abi
from tracea_cli.ops.lowrank_mlp.families.two_gemm_space import (
    NAME,
    Parts,
    applies,
    hand_picked,
    parts,
    two_gemm_space,
)
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import Target

XU_KERNEL, TV_KERNEL = "lowrank_xu", "lowrank_tv"


def _instantiation(problem: LowrankMlpProblem, config: Mapping[str, Value], epilogue: str) -> str:
    t = "tracea::MmaGemm" if config["family"] == "mma" else "tracea::SimtGemm"
    layout = "NN" if problem.layout == "nn" else "NT"
    names = (("block_m", "block_n", "block_k", "warp_m", "warp_n", "stages", "vec", "split_k", "group_m")
             if config["family"] == "mma" else
             ("block_m", "block_n", "block_k", "warp_m", "warp_n", "vec", "split_k", "group_m"))
    values = ", ".join(str(int(config[n])) for n in names)
    return f"{t}<{kernel_abi.ELEMENT[problem.dtype]}, tracea::Layout::{layout}, tracea::Epilogue::{epilogue}, {values}>"


def two_gemm_source(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> str:
    """The exact, self-contained CUDA source of one configuration: both kernels."""
    p = problem
    ps = parts(p, config)
    nt = "true" if p.layout == "nt" else "false"
    lines = kernel_abi.header_lines(p, NAME, config_key(config))
    for alias, sub, sub_config, epilogue in (("XU", ps.xu, ps.xu_config, "None"),
                                             ("TV", ps.tv, ps.tv_config, ps.tv.fused.template_name)):
        t = tiling(sub, sub_config)
        lines += [f"using {alias} = {_instantiation(p, sub_config, epilogue)};",
                  f'static_assert({alias}::THREADS == {t.threads}, "block size differs from the launch description");',
                  f'static_assert({alias}::SMEM_BYTES == {t.smem_bytes}, "shared memory differs from the launch '
                  'description");']
    for alias, kernel, call in (("XU", XU_KERNEL, f"tracea::lowrank_xu<XU, {nt}>"), ("TV", TV_KERNEL,
                                                                                       f"tracea::lowrank_tv<{nt}>")):
        sub_config = ps.xu_config if alias == "XU" else ps.tv_config
        engine, bounds = (("gemm_mma", f"{alias}::THREADS") if sub_config["family"] == "mma"
                          else ("gemm_simt", f"{alias}::THREADS, {alias}::MIN_BLOCKS"))
        run = f"[](const tracea::GemmArgs &g) {{ tracea::{engine}<{alias}>(g); }}"
        lines.append(f"extern \"C\" __global__ void __launch_bounds__({bounds}) {kernel}(TRACEA_LOWRANK_PARAMS) {{ "
                     f"{call}(TRACEA_LOWRANK_ARGS, {run}); }}")
    return "\n".join(lines) + "\n"


def rank_tiles(ps: Parts) -> int:
    """x·U's column blocks of the rank: its grid's y (a constant of the plan: the rank is fixed per kernel's shapes,
    `serves` says which)."""
    return -(-ps.xu.n // int(ps.xu_config["block_n"]))


def two_gemm_launch(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> LaunchPlan:
    """x·U over a block per block_m rows of x and block_n columns of the rank, then T·V over the GEMM engine's
    output tiles of y; T in scratch."""
    ps = parts(problem, config)
    xu, tv = tiling(ps.xu, ps.xu_config), tiling(ps.tv, ps.tv_config)
    elem = get_dtype(problem.dtype).storage_bytes
    t_scratch = Scratch(name="T", source=None, transposed=False, rows="M", cols="R", ld="ldt", ld_multiple=16 // elem,
                        elem_bytes=elem, align_bytes=SCRATCH_ALIGN_BYTES)
    return LaunchPlan(
        steps=(KernelStep(XU_KERNEL, grid=(f"m/{int(ps.xu_config['block_m'])}", rank_tiles(ps), 1),
                          block=(xu.threads, 1, 1),
                          dynamic_smem_bytes=xu.smem_bytes),
               KernelStep(TV_KERNEL, grid=("tiles", 1, 1), block=(tv.threads, 1, 1), dynamic_smem_bytes=tv.smem_bytes)),
        params=kernel_abi.PARAMS, scratch=(t_scratch,), tile_m=int(ps.tv_config["block_m"]),
        tile_n=int(ps.tv_config["block_n"]), alignment_bytes=max(xu.copy_bytes, tv.copy_bytes), family=NAME)


@dataclass(frozen=True)
class TwoGemmFamily:
    """ops/base.Family for the two GEMMs."""

    name: str = NAME
    backend: str = "cuda"

    def space(self, problem: LowrankMlpProblem, target: Target) -> SearchSpace | str:
        return applies(problem) or two_gemm_space(problem, target)

    def template(self, problem: LowrankMlpProblem) -> str | None:
        return None if applies(problem) else kernel_abi.template(problem)

    def source(self, problem: LowrankMlpProblem, config: Mapping[str, Value]) -> str:
        return two_gemm_source(problem, config)

    def launch(self, problem: LowrankMlpProblem, config: Mapping[str, Value]) -> LaunchPlan:
        return two_gemm_launch(problem, config)

    def args(self, problem: LowrankMlpProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
        return kernel_abi.kernel_args(problem, operands)

    def suggested(self, problem: LowrankMlpProblem, target: Target) -> list[dict[str, Value]]:
        return hand_picked(problem, target)[:2]

    def serves(self, built_for: LowrankMlpProblem, config: Mapping[str, Value],
               problem: LowrankMlpProblem) -> str | None:
        """Each GEMM's pipeline depth, vector width and tile order follow from the shape: a kernel serves the shapes
        that give the same ones."""
        built, wanted = parts(built_for, config), parts(problem, config)
        if (built.xu_config, built.tv_config) != (wanted.xu_config, wanted.tv_config):
            return "its GEMMs' pipeline depth, vector width or tile order differ at this shape"
        if rank_tiles(wanted) > rank_tiles(built):
            return (f"its x·U grid covers {rank_tiles(built)} column block(s) of the rank; rank {problem.rank} needs "
                    f"{rank_tiles(wanted)}")
        return None


TWO_GEMM = TwoGemmFamily()
