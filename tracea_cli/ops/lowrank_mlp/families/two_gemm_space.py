"""The search space of the two-GEMM CUDA family (families/two_gemm.py): T = x·U, then y = epilogue(T·V), each with the
GEMM engine's kernels (mma.sync for fp16 and bf16, SIMT for exact fp32), T through global memory in the input type.

A configuration names the block and warp tile of each GEMM (`xu_tile`, `tv_tile`: one of the GEMM engine's
hand-picked tiles, "BMxBNxBK/WMxWN/STAGES"); the rest of each GEMM configuration follows from the shape: a pipeline
no deeper than its K allows, the widest vector width its rows allow and, for T·V, the largest L2 grouping that has
enough rows of tiles. Each GEMM configuration is then judged by the GEMM engine's own space on its part of the
problem (engine_space.gemm_space of x·U as M x rank x d_in, of T·V as M x d_out x rank): a rejection is the GEMM's
reason, prefixed with the GEMM it is about. x·U's grid is a block per block_m rows of x (x) and block_n columns of
the rank (y).

The family applies where T may be rounded to the input type (intermediate "dtype", or an fp32 problem) and the
epilogue is one the GEMM engine fuses: none, bias, bias with an activation, bias with a residual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.gemm.families.engine_space import (
    _PICKS,
    FAMILY,
    gemm_space,
    vector_widths,
)
from tracea_cli.ops.gemm.problem import EPILOGUE_NAMES as GEMM_EPILOGUES
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value
from tracea_cli.target import Target

NAME = "two_gemm"
DTYPES = ("fp32", "fp16", "bf16")
GROUP_M = (8, 4, 1)  # T·V's tile order, largest first


def tile_names(dtype: str) -> tuple[str, ...]:
    """The GEMM engine's hand-picked tiles for `dtype` as this space names them."""
    key = "mma16" if dtype in ("fp16", "bf16") else dtype
    return tuple(f"{bm}x{bn}x{bk}/{wm}x{wn}/{st}" for bm, bn, bk, wm, wn, st in _PICKS[key])


def parse_tile(name: str) -> dict[str, int]:
    blocks, warps, stages = name.split("/")
    bm, bn, bk = (int(v) for v in blocks.split("x"))
    wm, wn = (int(v) for v in warps.split("x"))
    return {"block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn, "stages": int(stages)}


def applies(problem: LowrankMlpProblem) -> str | None:
    """None where the family has kernels for the problem, else why not."""
    if problem.dtype not in DTYPES:
        return f"the two-GEMM family runs {', '.join(DTYPES)}, not {problem.dtype}"
    if problem.intermediate == "fp32":  # fp32 problems say "dtype": their T is fp32 either way
        return (f"the two-GEMM family rounds T to {problem.dtype} in memory; intermediate=fp32 needs the fused "
                "family")
    if problem.epilogue not in GEMM_EPILOGUES:
        return (f"the two-GEMM family fuses the GEMM engine's epilogues ({', '.join(GEMM_EPILOGUES)}), not "
                f"{problem.epilogue}")
    return None


@dataclass(frozen=True)
class Parts:
    """The two GEMMs of a configuration: each one's problem and full GEMM engine configuration."""

    xu: GemmProblem
    xu_config: dict[str, Value]
    tv: GemmProblem
    tv_config: dict[str, Value]


def gemm_problems(problem: LowrankMlpProblem) -> tuple[GemmProblem, GemmProblem]:
    """x·U (M x rank x d_in) and T·V (M x d_out x rank, with the problem's epilogue), in the problem's layout."""
    p = problem
    return (GemmProblem(p.m, p.rank, p.d_in, p.dtype, p.layout),
            GemmProblem(p.m, p.d_out, p.rank, p.dtype, p.layout, p.epilogue))


def parts(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> Parts:
    """Each GEMM's configuration: its tile, split_k 1, the tile's pipeline depth or as deep as its K allows (T·V's K
    is the rank: often few steps), the widest vector width its rows allow, and for T·V the largest group_m with more
    rows of tiles than that (x·U: 1, its row tiles are its grid's x, the rank's column blocks its y). The GEMM
    engine's space then judges the whole configuration (the rule below)."""
    xu, tv = gemm_problems(problem)
    family = FAMILY[problem.dtype]

    def complete(sub: GemmProblem, tile: str, group_ms: tuple[int, ...]) -> dict[str, Value]:
        base = {"family": family, **parse_tile(tile), "split_k": 1}
        steps = -(-sub.k // base["block_k"])
        base["stages"] = max(2, min(base["stages"], steps + 1))
        vec = next(v for v in vector_widths(problem.dtype)
                   if v == 1 or (sub.k % v == 0 and (sub.layout == "nt" or sub.n % v == 0)))
        tiles_m = -(-sub.m // base["block_m"])
        group_m = next(g for g in group_ms if g == 1 or tiles_m > g)
        return {**base, "vec": vec, "group_m": group_m}

    return Parts(xu, complete(xu, str(config["xu_tile"]), (1,)), tv, complete(tv, str(config["tv_tile"]), GROUP_M))


def _rules(problem: LowrankMlpProblem, target: Target) -> tuple[Rule, ...]:
    xu, tv = gemm_problems(problem)
    spaces = {"x·U": gemm_space(xu, target), "T·V": gemm_space(tv, target)}

    shapes = {"x·U": "M x rank x d_in", "T·V": "M x d_out x rank"}

    def each_gemm(c) -> str | None:
        ps = parts(problem, c)
        for what, config, name in (("x·U", ps.xu_config, "xu_tile"), ("T·V", ps.tv_config, "tv_tile")):
            reason = spaces[what].why_invalid(spaces[what].complete(config))
            if reason:
                return f"{name}={c[name]}: {what} as a GEMM ({shapes[what]}) rejects it: {reason}"
        return None

    return (each_gemm,)


def two_gemm_space(problem: LowrankMlpProblem, target: Target) -> SearchSpace:
    names = tile_names(problem.dtype)
    return SearchSpace(params=(
        Param("family", (NAME,), "categorical", "kernel family: fused (T on chip) or two_gemm"),
        Param("xu_tile", names, "categorical", "x·U's GEMM tile: block BMxBNxBK / warp WMxWN / pipeline stages"),
        Param("tv_tile", names, "categorical", "T·V's GEMM tile: block BMxBNxBK / warp WMxWN / pipeline stages"),
    ), rules=_rules(problem, target))


def hand_picked(problem: LowrankMlpProblem, target: Target) -> list[Config]:
    """The first valid pairings of the GEMM engine's tiles, in its order (its best guesses for large problems first):
    x·U's tile as wide as the rank needs, then T·V's."""
    if applies(problem):
        return []
    space = two_gemm_space(problem, target)
    names = tile_names(problem.dtype)
    wide_first = sorted(names, key=lambda n: -min(parse_tile(n)["block_n"], max(problem.rank, 32)))
    picks: list[Config] = []
    for xu_tile in wide_first:
        for tv_tile in names:
            c = {"family": NAME, "xu_tile": xu_tile, "tv_tile": tv_tile}
            if space.why_invalid(c) is None and c not in picks:
                picks.append(c)
                break
        if len(picks) == 3:
            break
    return picks
