"""The search space of the CUDA FlashAttention-2-style family (families/fa2.py, kernels/cuda/attention_fa2.cuh):
parameters and the rules that reject a configuration before it is compiled.

A configuration names the query rows per block (`block_m`, split across `warps` warps, each owning whole 16-row
tiles whose Q fragments stay in its registers), the keys per step (`block_n`: one K and one V tile in shared memory
per pipeline stage) and the depth of the cp.async pipeline (`stages`). `kv_splits` > 1 splits the keys of each
(batch, head) into that many contiguous chunks, one block each, combined by a second kernel (split-KV, "flash
decoding"; kernels/cuda/attention_fa2_split.cuh): for decode, where the query blocks alone leave most SMs idle.
`pack_gqa` = 1 (split-KV with grouped-query heads only) gives a block the rows of all G = heads / kv_heads query heads
of one K/V head (G·L_q rows, tiled by block_m): each K/V tile is then read once per group instead of G times.

Rules come from the device (threads, shared memory, registers: tile_limits.block_resources), from the register
budget of a warp's tiles (Q fragments, the O accumulators and the S tile of one step, all per thread), from the
shape (a query block larger than L_q needs only repeats a smaller one, as a key block larger than L_k does; a
pipeline deeper than the key blocks it can hold in flight) and from the 32-bit kernel arguments. Pure: no GPU, no I/O,
no randomness.

`tiling(problem, config)` derives what the template computes (threads, shared memory, a register estimate); the
generated source asserts the same figures at compile time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.attention.problem import AttentionProblem
from tracea_cli.ops.tile_limits import block_resources, next_pow2
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value, config_key
from tracea_cli.target import DeviceLimits, Target

FAMILY = "fa2"
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128, 256)
BLOCK_M = (16, 32, 64, 128)
BLOCK_N = (16, 32, 64, 128)
WARPS = (1, 2, 4, 8)
STAGES = (2, 3)
KV_SPLITS = (1, 2, 4, 8, 16, 32)
PACK_GQA = (0, 1)
# Split-KV is in the space of problems with at most this many (batch·head, 16-row query block) pairs: with more, the
# plain grid has ~8 blocks per SM of the largest GPUs and a split only adds the combine's traffic. A problem bound,
# not the target's SM count, because the cache key hashes the sources a problem's space compiles from
# (families/fa2.py `template`): every problem above it keeps the key it had before split-KV existed.
SPLIT_MAX_TILES = 1024
# hand_picked splits the keys until there are this many blocks per SM of the target (small decode blocks of one or
# two warps: several share an SM, and a memory-bound kernel needs many loads in flight) ...
SPLIT_BLOCKS_PER_SM = 4
SPLIT_MIN_BLOCKS = 4  # ... leaving each chunk at least this many key blocks (the pipeline's prologue is per chunk)
PAD = 8  # elements of padding per shared row (the template's PAD)
ELEMENT_BYTES = 2
# Addresses, loop counters, the row statistics, the softmax's temporaries and the P fragments of one step. Checked
# against ptxas (tests/engine_cuda/test_attention_compile.py): head dim 256 with block_n 32 comes to 256 here and
# spills 20-28 bytes in ptxas; with block_n 16 (248 here) ptxas uses 243-246 registers and spills nothing.
REGISTER_OVERHEAD = 48
INT32_MAX = (1 << 31) - 1
GRID_Y_MAX = 65535
MIN_CC = (8, 0)


def applies(problem: AttentionProblem) -> str | None:
    """Why the family has no kernel for `problem`, or None."""
    if problem.dtype not in DTYPES:
        return f"the fa2 family runs {' and '.join(DTYPES)}, not {problem.dtype}"
    if problem.head_dim not in HEAD_DIMS:
        return f"the fa2 family has kernels for head dims {', '.join(map(str, HEAD_DIMS))}, not {problem.head_dim}"
    return None


@dataclass(frozen=True)
class Tiling:
    """What a configuration makes of its kernel (ops/tile_limits.block_resources reads these names)."""

    threads: int
    smem_bytes: int
    accumulator_regs: int  # the O accumulators, fp32, per thread
    estimated_regs: int
    copy_bytes: int = 16  # every global access is a 16-byte vector: pointers 16-byte aligned
    workspace_bytes_per_row: int = 0  # split-KV: fp32 O and lse of every chunk, per (query row, batch·head)


def tiling(problem: AttentionProblem, config: Mapping[str, Value]) -> Tiling:
    """Mirrors Fa2's constants (kernels/cuda/attention_fa2.cuh)."""
    bm, bn, warps, stages = (int(config[n]) for n in ("block_m", "block_n", "warps", "stages"))
    d = problem.head_dim
    tiles_m = bm // warps // 16 if bm % warps == 0 else 0
    smem = (bm + 2 * stages * bn) * (d + PAD) * ELEMENT_BYTES
    q_regs = tiles_m * (d // 16) * 4
    o_regs = tiles_m * (d // 8) * 4
    s_regs = tiles_m * (bn // 8) * 4
    splits = kv_splits_of(config)
    return Tiling(threads=warps * 32, smem_bytes=smem, accumulator_regs=o_regs,
                  estimated_regs=q_regs + o_regs + s_regs + REGISTER_OVERHEAD,
                  workspace_bytes_per_row=splits * (d + 1) * 4 if splits > 1 else 0)


def kv_splits_of(config: Mapping[str, Value]) -> int:
    """A configuration's kv_splits (1 for one stored before the parameter existed)."""
    return int(config.get("kv_splits", 1))


def pack_of(config: Mapping[str, Value]) -> bool:
    """Whether a configuration packs the query heads of a K/V head into one block (0 for one stored before the
    parameter existed)."""
    return bool(int(config.get("pack_gqa", 0)))


def group_of(problem: AttentionProblem) -> int:
    """G: query heads per K/V head."""
    return problem.heads // problem.kv_heads


def block_rows(problem: AttentionProblem, config: Mapping[str, Value]) -> int:
    """The rows a configuration tiles by block_m for one grid y: L_q, or G·L_q packed."""
    return problem.seq * (group_of(problem) if pack_of(config) else 1)


def grid_blocks(problem: AttentionProblem, config: Mapping[str, Value]) -> int:
    """Blocks of the (split) kernel's grid before the keys are split: query blocks x batch·heads (packed:
    batch·kv_heads)."""
    heads = problem.kv_heads if pack_of(config) else problem.heads
    return problem.batch * heads * -(-block_rows(problem, config) // int(config["block_m"]))


def query_tiles(problem: AttentionProblem) -> int:
    """(batch·head, 16-row query block) pairs: the most blocks a grid without split-KV can have."""
    return problem.batch * problem.heads * -(-problem.seq // 16)


def admits_split(problem: AttentionProblem) -> bool:
    """Whether kv_splits > 1 is in the problem's space (see SPLIT_MAX_TILES)."""
    return query_tiles(problem) <= SPLIT_MAX_TILES


def argument_rules(problem: AttentionProblem) -> tuple[Rule, Rule]:
    """The rules of the kernel ABI both CUDA families share (TRACEA_ATTENTION_PARAMS, one block per batch·head in
    grid y): grid y's 65535 blocks, and strides within the 32-bit arguments."""
    p = problem

    def grid(c) -> str | None:
        if p.batch * p.heads > GRID_Y_MAX:
            return f"batch x heads = {p.batch * p.heads} exceeds the {GRID_Y_MAX} blocks of grid y"
        return None

    def int32_strides(c) -> str | None:
        biggest = max(p.batch * p.heads, p.batch * p.kv_heads) * max(p.seq, p.seq_k) * p.head_dim
        if biggest > INT32_MAX:
            return f"a tensor of {biggest} elements has strides past the kernel's 32-bit arguments"
        return None

    return grid, int32_strides


def _params() -> tuple[Param, ...]:
    return (
        Param("family", (FAMILY,), "categorical",
              "kernel family: fa2 (mma.sync, online softmax, FlashAttention-2 style)"),
        Param("block_m", BLOCK_M, doc="query rows per block (split across the warps, 16-row tiles each)"),
        Param("block_n", BLOCK_N, doc="keys per pipeline step (one K and one V tile in shared memory)"),
        Param("warps", WARPS, doc="warps per block, each owning block_m / warps query rows"),
        Param("stages", STAGES, doc="key/value blocks in flight (cp.async pipeline depth)"),
        Param("kv_splits", KV_SPLITS, default=1,
              doc="contiguous chunks of the keys, one block each, combined by a second kernel (split-KV)"),
        Param("pack_gqa", PACK_GQA, default=0,
              doc="split-KV with grouped-query heads: one block per K/V head holds the rows of all its query heads"),
    )


def _rules(problem: AttentionProblem, limits: DeviceLimits) -> tuple[Rule, ...]:
    p = problem

    def architecture(c) -> str | None:
        if limits.compute_capability < MIN_CC:
            return (f"mma.sync with cp.async needs compute capability 8.0 or newer, {limits.arch} has "
                    f"{limits.compute_capability[0]}.{limits.compute_capability[1]}")
        return None

    def warp_rows(c) -> str | None:
        if c["block_m"] % (16 * c["warps"]):
            return f"block_m={c['block_m']} does not give each of {c['warps']} warps whole 16-row tiles"
        return None

    def tiles_fit_problem(c) -> str | None:
        rows = ("block_m", p.seq, "seq") if not pack_of(c) else ("block_m", block_rows(p, c), "heads/kv_heads x seq")
        for name, size, what in (rows, ("block_n", p.seq_k, "seq_k")):
            cap = max(16, next_pow2(size))
            if c[name] > cap:
                return f"{name}={c[name]} is larger than {what}={size} needs (at most {cap})"
        return None

    def pipeline_depth(c) -> str | None:
        blocks = -(-p.seq_k // c["block_n"])
        if c["stages"] > 2 and blocks < c["stages"]:
            return f"a {c['stages']}-stage pipeline needs {c['stages']} key blocks; seq_k={p.seq_k} gives {blocks}"
        return None

    def split_kv(c) -> str | None:
        splits = c["kv_splits"]
        if splits == 1:
            return None
        if not admits_split(p):
            return (f"kv_splits={splits}: the problem has {query_tiles(p)} (batch·head, 16-row query block) pairs, "
                    f"enough blocks without splitting the keys (split-KV is in the space up to {SPLIT_MAX_TILES})")
        blocks = -(-p.seq_k // c["block_n"])
        if splits > blocks:
            return (f"kv_splits={splits} is more chunks than the {blocks} key blocks of block_n={c['block_n']} "
                    f"over seq_k={p.seq_k}")
        return None

    def pack_gqa(c) -> str | None:
        if not pack_of(c):
            return None
        if p.kv_heads == p.heads:
            return f"pack_gqa=1 packs the query heads of a K/V head; heads={p.heads} has as many K/V heads"
        if c["kv_splits"] == 1:
            return "pack_gqa=1 is a mode of the split-KV kernel: it needs kv_splits > 1"
        group = group_of(p)
        if c["block_m"] % group:
            # the grid's query blocks are the rule m/(block_m / G) of L_q: ceil(G·L_q / block_m) exactly
            return (f"pack_gqa=1 needs block_m a multiple of the {group} query heads per K/V head; "
                    f"block_m={c['block_m']} is not")
        return None

    def resources(c) -> str | None:
        return block_resources(tiling(p, c), {"warp_m": c["block_m"] // c["warps"], "warp_n": p.head_dim, **c},
                               limits)

    grid, int32_strides = argument_rules(p)
    return (architecture, warp_rows, tiles_fit_problem, pipeline_depth, grid, int32_strides, split_kv, pack_gqa,
            resources)


def fa2_space(problem: AttentionProblem, target: Target) -> SearchSpace:
    """The fa2 configurations for `problem` on `target` (limits from the target or its architecture)."""
    return SearchSpace(params=_params(), rules=_rules(problem, target.cuda_limits()))


# Hand-picked starting points (block_m, block_n, warps, stages) by head dim, best guesses first: FlashAttention-2's
# own forward tiles (128 x 64 / 4 warps for D 64; 128 x 32 or 64 x 64 for D 128), then smaller ones for short
# sequences and decode.
_PICKS: dict[int, tuple[tuple[int, int, int, int], ...]] = {
    64: ((128, 64, 4, 2), (128, 128, 8, 2), (64, 64, 4, 3), (64, 128, 4, 2), (128, 64, 8, 3), (16, 64, 1, 2),
         (16, 128, 1, 2)),
    128: ((128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 3), (64, 32, 4, 3), (16, 64, 1, 2), (16, 32, 1, 2)),
    256: ((64, 16, 4, 2), (128, 16, 8, 2), (64, 16, 4, 3), (16, 16, 1, 2)),
}


def split_for(problem: AttentionProblem, config: Mapping[str, Value], sm_count: int) -> int:
    """The kv_splits hand_picked gives `config`: 1 where its grid already has SPLIT_BLOCKS_PER_SM blocks per SM (or
    the problem has no split-KV), else the fewest chunks that get there, at most as many as leave each chunk
    SPLIT_MIN_BLOCKS key blocks."""
    if not admits_split(problem) or not sm_count:
        return 1
    blocks = grid_blocks(problem, config)
    key_blocks = -(-problem.seq_k // int(config["block_n"]))
    want = SPLIT_BLOCKS_PER_SM * sm_count
    if blocks >= want:
        return 1
    fitting = [s for s in KV_SPLITS if key_blocks // s >= SPLIT_MIN_BLOCKS]
    return next((s for s in fitting if blocks * s >= want), fitting[-1] if fitting else 1)


# hand_picked puts at most this many pack_gqa = 1 picks before the best unpacked one, which the tuner and the
# benchmark then compare them with
PACKED_FIRST = 2


def _base_picks(problem: AttentionProblem, space: SearchSpace, rows: int, pack: int) -> list[Config]:
    """_PICKS shrunk to `rows` query rows and the problem's keys, unsplit, in the order of _PICKS (pack_gqa = 1 ones
    as they would be with kv_splits > 1: valid once split)."""
    picks: list[Config] = []
    values = {p.name: p.values for p in space.params}
    fit_m = min((v for v in values["block_m"] if v >= rows), default=max(values["block_m"]))
    fit_n = min((v for v in values["block_n"] if v >= problem.seq_k), default=max(values["block_n"]))
    for bm, bn, warps, stages in _PICKS[problem.head_dim]:
        # a short sequence takes the pick shrunk to the blocks it needs (seq = 1 or 17 rejects every larger block)
        bm, bn = min(bm, fit_m), min(bn, fit_n)
        warps = min(warps, max(1, bm // 16))
        for s in dict.fromkeys((stages, 2)):
            cfg = {"family": FAMILY, "block_m": bm, "block_n": bn, "warps": warps, "stages": s, "kv_splits": 1,
                   "pack_gqa": pack}
            if space.why_invalid({**cfg, "kv_splits": 2} if pack else cfg) is None:
                if cfg not in picks:
                    picks.append(cfg)
                break
    if rows <= 16:
        picks.sort(key=lambda c: c["block_m"] != 16)  # stable
    return picks


def hand_picked(problem: AttentionProblem, target: Target, *, limit: int | None = None) -> list[Config]:
    """A few valid configurations for `problem`, best guesses first; where the query blocks of a pick would leave
    most SMs idle (decode: L_q of a few rows), the 16-row picks go first, and where the target's SM count is known,
    each pick split over the keys (split_for) goes in front of it unsplit. With grouped-query heads, the split picks
    that pack a group's query heads into one block (pack_gqa = 1) go first, PACKED_FIRST of them before the best
    unpacked pick."""
    space = fa2_space(problem, target)
    picks = _base_picks(problem, space, problem.seq, pack=0)
    sm_count = (target.limits.sm_count if target.limits else None) or 0

    def split(candidates: list[Config]) -> list[Config]:
        return [c for c in ({**c, "kv_splits": split_for(problem, c, sm_count)} for c in candidates)
                if c["kv_splits"] > 1 and space.why_invalid(c) is None]

    packed = split(_base_picks(problem, space, problem.seq * group_of(problem), pack=1)) \
        if problem.kv_heads < problem.heads and admits_split(problem) else []
    unpacked = split(picks) + picks
    unique: dict[str, Config] = {}
    for c in packed[:PACKED_FIRST] + unpacked[:1] + packed[PACKED_FIRST:] + unpacked[1:]:
        unique.setdefault(config_key(c), c)
    picks = list(unique.values())
    return picks[:limit] if limit else picks


def describe(config: Mapping[str, Value]) -> str:
    """A short human label: "fa2 128x64 w4 s2", "fa2 16x64 w1 s2 kv8" with split-KV, "... kv8 gqa" packed."""
    tail = f" kv{kv_splits_of(config)}" if kv_splits_of(config) > 1 else ""
    tail += " gqa" if pack_of(config) else ""
    return f"fa2 {config['block_m']}x{config['block_n']} w{config['warps']} s{config['stages']}{tail}"
