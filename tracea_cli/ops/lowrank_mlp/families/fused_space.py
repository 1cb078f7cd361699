"""The search space of the fused CUDA family (families/fused.py, kernels/cuda/lowrank_mlp.cuh `LowrankFused`; fp16 and
bf16 on mma.sync, fp32 as 3xTF32): parameters and the rules that reject a configuration before it is compiled.

A configuration names the rows of x a block owns (block_m), its warps (4 or 8), how phase 1's warps split the rank
(warps_n1: the warp grid over block_m x rank is (warps / warps_n1) x warps_n1), phase 1's depth of d_in per pipeline
step (block_k), the width of the chunks of V streamed through phase 2 (block_n) and how phase 2's warps split them
(warps_n2), the pipeline depth (stages, for both phases), the vector width of the global copies (vec, in elements;
1 copies single elements through registers) and the blocks per SM promised to ptxas (min_blocks: 2 caps a thread's
registers so that two blocks fit), how many blocks share one block_m of rows (split_n: each computes the rows' T
and then its share of d_out's chunks, for problems with too few row blocks to fill the GPU) and whether phase 2 stages each finished chunk in shared memory and stores y in 16-byte rows (stage_y; with a residual,
act(x·U·V + bias) is rounded to the input type once before the residual is added, one more rounding than the direct
store).

Rules come from the device (compute capability, threads, shared memory, registers), from the shape (vector copies
need rows whose length is a multiple of the width; tiles no larger than the problem needs; the whole rank fits one
tile only up to MAX_RANK) and from the parameters (warp grids use every warp, warp tiles are whole 16 x 16 pieces).
Pure: no GPU, no I/O, no randomness.

`tiling(problem, config)` derives what the kernel template computes (threads, padded rank, warp tiles, shared
memory, accumulators); the generated source asserts the same figures at compile time, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.families.engine_space import REGISTER_OVERHEAD, vector_widths
from tracea_cli.ops.lowrank_mlp.problem import LowrankMlpProblem
from tracea_cli.ops.tile_limits import (
    ASSUMED_SMS,
    MAX_ACCUMULATOR_REGS,
    MAX_THREAD_REGS,
    next_pow2,
)
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value
from tracea_cli.target import DeviceLimits, Target

FAMILY = "fused"
DTYPES = ("fp16", "bf16", "fp32")  # fp32 as 3xTF32: fp32 accuracy on tensor cores
MAX_RANK = 256  # the whole rank in one tile: wider ranks run the two-GEMM family
MIN_CC = (8, 0)  # cp.async, bf16 mma.sync
BLOCK_M = (32, 64, 128)
WARPS = (4, 8, 16)  # 16: more warps to hide latency where one block fills an SM
WARPS_N = (1, 2, 4, 8)
BLOCK_K = (32, 64)
BLOCK_N = (64, 128, 256)
STAGES = (2, 3, 4, 6, 8)  # deep rings keep enough bytes in flight where one block fills an SM
MIN_BLOCKS = (1, 2)
FLAGS = (0, 1)
SPLIT_N = (1, 2, 4)
STORE_BYTES = 16  # stage_y's stores of y (and loads of the residual)
PAD_K_ROWS = 8  # elements shared rows along K are padded by (LowrankFused::PAD_K_ROWS)
# Accumulators and fragments one phase keeps live per thread: above this ptxas spilled (phase 1 with 128 accumulators
# and 40 fragment registers: 254 registers and 8 bytes of spill on sm_90a; 128 + 32: 201 registers, none)
MAX_LIVE_REGS = 160


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


@dataclass(frozen=True)
class Tiling:
    """What a configuration makes of LowrankFused: mirrors its constants."""

    threads: int
    r_pad: int  # T's columns: the rank padded to whole 16-column pieces of every phase-1 warp column
    r_k: int  # phase 2's K: the rank in whole 16-deep instruction steps
    warp_m1: int
    warp_n1: int
    warp_m2: int
    warp_n2: int
    smem_bytes: int
    acc1: int  # phase 1's accumulator registers per thread
    acc2: int  # phase 2's
    live1: int  # phase 1's accumulators + fragments per thread
    live2: int  # phase 2's
    estimated_regs: int  # the larger phase's accumulators + fragments, plus addresses and counters
    copy_bytes: int
    alignment_bytes: int  # what y, x, U, V and the residual must be aligned to: the widest global access


def tiling(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> Tiling:
    bm, warps, bk, bn = (int(config[k]) for k in ("block_m", "warps", "block_k", "block_n"))
    wn1, wn2, stages, vec = (int(config[k]) for k in ("warps_n1", "warps_n2", "stages", "vec"))
    nt = problem.layout == "nt"
    elem = get_dtype(problem.dtype).storage_bytes
    fp32 = problem.dtype == "fp32"
    pad_n = 4 if fp32 else 8  # rows along N (LowrankFused::PAD_N_ROWS)
    r_pad = _round_up(problem.rank, 16 * wn1)
    r_k = _round_up(problem.rank, 16)
    wm1, wm2 = bm // max(1, warps // wn1), bm // max(1, warps // wn2)
    tile_n1, tile_n2 = r_pad // wn1, bn // wn2
    stage_x = bm * (bk + PAD_K_ROWS)
    stage1 = stage_x + (r_pad * (bk + PAD_K_ROWS) if nt else bk * (r_pad + pad_n))
    stage2 = bn * (r_k + PAD_K_ROWS) if nt else r_k * (bn + pad_n)
    t_elems = bm * (r_pad + PAD_K_ROWS)
    split = 2 if problem.intermediate == "fp32" else 1
    staged = bool(int(config.get("stage_y", 0)))
    y_elems = bm * (bn + pad_n) if staged else 0
    smem = (stages * max(stage1, stage2) + split * t_elems + y_elems) * elem
    acc1, acc2 = wm1 * tile_n1 // 32, wm2 * tile_n2 // 32
    sets = 2 if fp32 else 1  # 3xTF32 holds each fragment as big and small
    frag1 = sets * ((wm1 // 16) * 4 + (tile_n1 // 8) * 2)
    frag2 = sets * ((wm2 // 16) * 4 + (tile_n2 // 8) * 2)
    return Tiling(threads=warps * 32, r_pad=r_pad, r_k=r_k, warp_m1=wm1, warp_n1=tile_n1, warp_m2=wm2,
                  warp_n2=tile_n2, smem_bytes=smem, acc1=acc1, acc2=acc2, live1=acc1 + frag1, live2=acc2 + frag2,
                  estimated_regs=max(acc1 + frag1, acc2 + frag2) + REGISTER_OVERHEAD, copy_bytes=vec * elem,
                  alignment_bytes=max(vec * elem, STORE_BYTES if staged else 0))


def applies(problem: LowrankMlpProblem) -> str | None:
    """None where the family has kernels for the problem, else why not."""
    if problem.dtype not in DTYPES:
        return f"the fused family runs {', '.join(DTYPES)} on tensor cores, not {problem.dtype}"
    if problem.rank > MAX_RANK:
        return f"the fused family keeps the whole rank in one tile, up to rank {MAX_RANK}; rank {problem.rank} is wider"
    return None


def _params(problem: LowrankMlpProblem) -> tuple[Param, ...]:
    return (
        Param("family", (FAMILY,), "categorical", "kernel family: fused (T on chip) or two_gemm"),
        Param("block_m", BLOCK_M, doc="rows of x and y per block"),
        Param("warps", WARPS, doc="warps per block"),
        Param("warps_n1", WARPS_N, doc="phase 1: warps across the rank (the rest across block_m)"),
        Param("block_k", BLOCK_K, doc="phase 1: depth of d_in per pipeline step"),
        Param("block_n", BLOCK_N, doc="phase 2: columns of V (and y) per chunk"),
        Param("warps_n2", WARPS_N, doc="phase 2: warps across a chunk (the rest across block_m)"),
        Param("stages", STAGES, doc="shared-memory pipeline depth of both phases"),
        Param("vec", vector_widths(problem.dtype), doc="elements per global copy; 1 copies through registers"),
        Param("min_blocks", MIN_BLOCKS, doc="blocks per SM promised to ptxas (2 caps the registers per thread)"),
        Param("stage_y", FLAGS, doc="1: y goes through shared memory and out in 16-byte rows"),
        Param("split_n", SPLIT_N, doc="blocks sharing one block_m of rows, each computing T and a share of d_out"),
    )


def row_lengths(problem: LowrankMlpProblem) -> dict[str, int]:
    """The rows the kernel copies with vector loads, by what they are: x's, U's and V's as the layout stores them."""
    if problem.layout == "nn":
        return {"d_in (rows of x)": problem.d_in, "rank (rows of U)": problem.rank, "d_out (rows of V)": problem.d_out}
    return {"d_in (rows of x and U)": problem.d_in, "rank (rows of V)": problem.rank}


def _rules(problem: LowrankMlpProblem, limits: DeviceLimits) -> tuple[Rule, ...]:
    m, d_in, rank, d_out = problem.m, problem.d_in, problem.rank, problem.d_out
    rows = row_lengths(problem)

    def architecture(c) -> str | None:
        if limits.compute_capability < MIN_CC:
            cc = f"{limits.compute_capability[0]}.{limits.compute_capability[1]}"
            return f"mma.sync with cp.async needs compute capability 8.0 or newer, {limits.arch} has {cc}"
        return None

    def warp_grids(c) -> str | None:
        for name in ("warps_n1", "warps_n2"):
            if c["warps"] % c[name]:
                return f"{name}={c[name]} does not divide warps={c['warps']}"
        pieces = -(-rank // 16)
        if c["warps_n1"] > pieces:
            return (f"warps_n1={c['warps_n1']} splits rank {rank} ({pieces} piece(s) of 16 columns) over more warps "
                    "than it has pieces")
        return None

    def warp_tiles(c) -> str | None:
        t = tiling(problem, c)
        if t.warp_m1 < 16 or t.warp_m1 % 16:
            return (f"phase 1's warp tile has {t.warp_m1} rows (block_m={c['block_m']} over "
                    f"{c['warps'] // c['warps_n1']} warps): not whole 16-row pieces")
        if t.warp_m2 < 16 or t.warp_m2 % 16 or t.warp_n2 < 16 or t.warp_n2 % 16:
            return (f"phase 2's warp tile is {t.warp_m2}x{t.warp_n2} (block_m={c['block_m']}, block_n={c['block_n']} "
                    f"over {c['warps'] // c['warps_n2']}x{c['warps_n2']} warps): not whole 16 x 16 pieces")
        return None

    def tile_fits_problem(c) -> str | None:
        for name, size, dim, smallest in (("block_m", m, "M", BLOCK_M[0]), ("block_n", d_out, "d_out", BLOCK_N[0]),
                                          ("block_k", d_in, "d_in", BLOCK_K[0])):
            cap = max(smallest, next_pow2(size))
            if c[name] > cap:
                return f"{name}={c[name]} is larger than {dim}={size} needs (at most {cap})"
        return None

    def aligned_rows(c) -> str | None:
        vec = c["vec"]
        if vec == 1:
            return None
        bad = [f"{what}={n}" for what, n in rows.items() if n % vec]
        if bad:
            return f"vec={vec} copies need rows whose length is a multiple of {vec}; {', '.join(bad)}"
        return None

    def element_copies(c) -> str | None:
        # 16-bit single-element copies go through registers, slowly: only for rows that allow nothing wider
        if c["vec"] == 1 and problem.dtype != "fp32" and all(n % 2 == 0 for n in rows.values()):
            return f"vec=1 copies single 16-bit elements through registers; {', '.join(rows)} allow vec=2 or wider"
        return None

    def d_out_shares(c) -> str | None:
        chunks = -(-d_out // c["block_n"])
        if c["split_n"] > chunks:
            return (f"split_n={c['split_n']} shares d_out={d_out} ({chunks} chunk(s) of block_n={c['block_n']}) "
                    "among more blocks than it has chunks")
        return None

    def pipeline_depth(c) -> str | None:
        steps = -(-d_in // c["block_k"])
        if c["stages"] > 2 and c["stages"] > steps + 1:
            return (f"a {c['stages']}-stage pipeline needs {c['stages'] - 1} steps; d_in={d_in} gives {steps} of "
                    f"block_k={c['block_k']}")
        return None

    def resources(c) -> str | None:
        t = tiling(problem, c)
        if t.threads > limits.max_threads_per_block:
            return f"{t.threads} threads per block exceed the device's {limits.max_threads_per_block}"
        for phase, acc, live in (("phase 1", t.acc1, t.live1), ("phase 2", t.acc2, t.live2)):
            if acc > MAX_ACCUMULATOR_REGS:
                return (f"{phase}'s warp tile needs {acc} accumulator registers per thread; more than "
                        f"{MAX_ACCUMULATOR_REGS} spill")
            if live > MAX_LIVE_REGS:
                return (f"{phase} keeps {live} registers of accumulators and fragments live per thread; more than "
                        f"{MAX_LIVE_REGS} leave too few for its addresses (ptxas spills)")
        if t.estimated_regs > MAX_THREAD_REGS:
            return f"about {t.estimated_regs} registers per thread exceed the {MAX_THREAD_REGS} a thread can have"
        blocks = int(c["min_blocks"])
        if t.estimated_regs * t.threads * blocks > limits.registers_per_sm:
            return (f"about {t.estimated_regs} registers for each of {t.threads} threads leave no room for "
                    f"min_blocks={blocks} block(s) in the {limits.registers_per_sm} registers of an SM")
        if t.smem_bytes > limits.max_shared_per_block_optin:
            return (f"{t.smem_bytes} bytes of shared memory exceed the device's {limits.max_shared_per_block_optin} "
                    "per block")
        if blocks > 1 and blocks * t.smem_bytes > limits.max_shared_per_sm:
            return (f"min_blocks={blocks} needs {blocks} x {t.smem_bytes} bytes of shared memory, more than the "
                    f"{limits.max_shared_per_sm} of an SM")
        return None

    return (architecture, warp_grids, tile_fits_problem, aligned_rows, element_copies, d_out_shares, pipeline_depth,
            warp_tiles, resources)


def fused_space(problem: LowrankMlpProblem, target: Target) -> SearchSpace:
    limits = target.cuda_limits()
    return SearchSpace(params=_params(problem), rules=_rules(problem, limits))


# Hand-picked starting points (block_m, warps, warps_n1, block_k, block_n, warps_n2, stages), best guesses first, from
# the H200 ladder of 2026-12-03 (docs/results/lowrank_variants_h200_2026-12-03_1246.md): 64 rows with two blocks per
# SM (rank 64), 128 rows on 16 warps with 64-wide chunks (rank 256: 8 warps would hold 64 accumulators a thread),
# 128 rows with a 6-deep ring, 32 rows; then shorter blocks and a small one every shape admits.
_PICKS = (
    (64, 8, 4, 64, 128, 4, 4),
    (128, 16, 4, 32, 64, 4, 3),
    (128, 8, 2, 64, 128, 4, 6),
    (32, 8, 4, 64, 128, 4, 4),
    (64, 8, 4, 32, 64, 4, 2),
    (64, 4, 2, 64, 128, 2, 3),
    (64, 4, 1, 32, 128, 2, 2),
    (32, 4, 2, 32, 64, 4, 2),
)


def split_for(problem: LowrankMlpProblem, block_m: int, sm_count: int) -> int:
    """The d_out split the picks take: the largest of SPLIT_N that keeps the blocks within one wave of the SMs (1
    where the row blocks alone fill them). Measured: at M = 4096 split_n = 2 was the best of every tile."""
    row_blocks = -(-problem.m // block_m)
    return max(s for s in SPLIT_N if s == 1 or row_blocks * s <= sm_count)


def hand_picked(problem: LowrankMlpProblem, target: Target) -> list[Config]:
    """A few valid configurations, best guesses first: each pick with y staged where the shared memory allows (else
    stored directly; staging measured faster at nearly every tile of the 2026-12-03 ladders), d_out split where the row blocks alone leave SMs idle (`split_for`), the widest vector width the rows
    allow and two blocks per SM where they fit (else one), and shallower pipelines or narrower phase-1 warp grids
    where the shape needs them."""
    if applies(problem):
        return []
    space = fused_space(problem, target)
    sms = target.cuda_limits().sm_count or ASSUMED_SMS
    picks: list[Config] = []
    for bm, warps, wn1, bk, bn, wn2, stages in _PICKS:
        flags = ((1, split_for(problem, bm, sms)), (1, 1), (0, 1))
        c = _first_valid(_variants(bm, warps, wn1, bk, bn, wn2, stages, space, flags), space)
        if c is not None and c not in picks:
            picks.append(c)
    return picks


def _first_valid(configs, space: SearchSpace) -> Config | None:
    return next((c for c in configs if space.why_invalid(c) is None), None)


def _variants(bm, warps, wn1, bk, bn, wn2, stages, space, flags):
    for warps_n1 in dict.fromkeys((wn1, 2, 1)):
        for st in dict.fromkeys((stages, 4, 2)):
            for stage_y, split_n in flags:
                for vec in space.param("vec").values:
                    for blocks in (2, 1):
                        yield {"family": FAMILY, "block_m": bm, "warps": warps, "warps_n1": warps_n1, "block_k": bk,
                               "block_n": bn, "warps_n2": wn2, "stages": st, "vec": vec, "min_blocks": blocks,
                               "stage_y": stage_y, "split_n": split_n}
