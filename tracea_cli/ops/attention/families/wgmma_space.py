"""The search space of the CUDA FlashAttention-3-style family for sm_90a (families/wgmma.py,
kernels/cuda/attention_wgmma.cuh): parameters and the rules that reject a configuration before it is compiled.

A configuration names the keys per step (`block_n`: one K and one V tile per ring slot, the N of the S = Q·Kᵀ
wgmma), the depth of the TMA ring (`stages`), the consumer warpgroups (`consumers`, 64 query rows each: block_m =
64·consumers) and the schedule (`overlap` 1: FlashAttention-3's intra-warpgroup overlap, a key block's softmax while
the previous block's P·V is on the tensor cores; `pingpong` 1: FlashAttention-3's inter-warpgroup overlap, the two
consumer warpgroups taking turns on the tensor cores, ordered by named barriers). The head dim, the dtype, the mask
and lse are the problem's (template parameters).

Where the family applies at all (`applies`): fp16/bf16, head dims 64 and 128, the layout (B, H, L, D) (TMA reads
each head's rows as one 3-D map; fa2 serves (B, L, H, D)), sequences of at least one 64-row query block (decode,
L_q < 64, is fa2's split-KV), and an sm_90 target (wgmma, setmaxnreg: sm_90a). The rules then come from the device
(threads, shared memory: Q + STAGES·(K + V) tiles + the barriers), from the consumer's register budget after
setmaxnreg (the S and O accumulators, P's fragments and the rest, per thread), from the shape (a key block or a query
block larger than the problem needs only repeats a smaller one; a ring deeper than the key blocks) and from the
32-bit kernel arguments. Pure: no GPU, no I/O, no randomness.

`tiling(problem, config)` derives what the template computes; the generated source asserts the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.attention.families.fa2_space import argument_rules
from tracea_cli.ops.attention.problem import AttentionProblem
from tracea_cli.ops.tile_limits import next_pow2
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value
from tracea_cli.target import DeviceLimits, Target, base_arch

FAMILY = "fa3"
ARCH = "sm_90a"  # wgmma and setmaxnreg exist only on the architecture-specific target
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128)
LAYOUT = "bhld"
ROWS_PER_CONSUMER = 64  # one m64 wgmma per consumer warpgroup
MIN_SEQ = ROWS_PER_CONSUMER  # shorter query sequences (decode) are fa2's, split over the keys
BLOCK_N = (64, 128)
STAGES = (2, 3, 4)
CONSUMERS = (1, 2)
OVERLAP = (0, 1)
PINGPONG = (0, 1)
ELEMENT_BYTES = 2
SWIZZLE_BYTES = 128  # one swizzled row of a tile: 64 elements, a TMA box's width
CHUNK = SWIZZLE_BYTES // ELEMENT_BYTES
ALIGN_SLACK_BYTES = 1024  # the template aligns its base to the swizzle's 1024-byte period
# Registers a consumer thread's code may have: 255 with one consumer (256 threads); with two (384 threads) the
# consumers' code is allocated under the template's setmaxnreg.inc 232 (ptxas reports the kernel's 168 at entry, and
# the consumers' code uses more: measured with NVRTC 13.0, the ping-pong schedule overlapped at 128 x 128 of D 128
# uses registers up to R183 without spilling)
CONSUMER_REGS = {1: 255, 2: 232}  # a guard: no configuration of today's parameter values reaches either budget
# Measured exception: the overlapped schedule without ping-pong at 128 keys of D 128 with two consumers spills in
# ptxas (200 bytes of spill stores with NVRTC 13.0, every dtype, mask and lse variant) although its estimate fits;
# the same tile with ping-pong does not (tests/engine_hopper/test_attention_wgmma_compile.py)
SPILLS_WITHOUT_PINGPONG = {"block_n": 128, "head_dim": 128, "consumers": 2, "overlap": 1, "pingpong": 0}
REGISTER_OVERHEAD = 40


def applies(problem: AttentionProblem, target: Target | None = None) -> str | None:
    """Why the family has no kernel for `problem` (on `target`, when given), or None."""
    p = problem
    if p.dtype not in DTYPES:
        return f"the fa3 family runs {' and '.join(DTYPES)}, not {p.dtype}"
    if p.head_dim not in HEAD_DIMS:
        return f"the fa3 family has kernels for head dims {', '.join(map(str, HEAD_DIMS))}, not {p.head_dim}"
    if p.layout != LAYOUT:
        return (f"the fa3 family reads the layout {LAYOUT} only (each head's rows one TMA map), not {p.layout}: "
                "fa2 serves it")
    if p.seq < MIN_SEQ:
        return (f"the fa3 family needs at least one {MIN_SEQ}-row query block; seq={p.seq} is decode, which fa2 "
                "splits over the keys")
    if target is not None and (target.backend != "cuda" or not target.arch or base_arch(target.arch) != "sm_90"):
        return f"the fa3 family needs an sm_90 target (wgmma, built for {ARCH}), not {target.arch or target.backend}"
    return None


@dataclass(frozen=True)
class Tiling:
    """What a configuration makes of its kernel (mirrors the template's Fa3 constants)."""

    block_m: int
    threads: int
    smem_bytes: int
    q_bytes: int  # one Q tile: the q_full barrier's expected bytes
    kv_bytes: int  # one K (or V) tile: full_k's (full_v's) expected bytes
    estimated_regs: int  # per consumer thread
    copy_bytes: int = 16  # TMA: base addresses and row strides 16-byte aligned


def tiling(problem: AttentionProblem, config: Mapping[str, Value]) -> Tiling:
    d = problem.head_dim
    bn, stages, consumers = (int(config[n]) for n in ("block_n", "stages", "consumers"))
    bm = ROWS_PER_CONSUMER * consumers
    q_bytes, kv_bytes = bm * d * ELEMENT_BYTES, bn * d * ELEMENT_BYTES
    barriers = 1 + 3 * stages
    smem = ALIGN_SLACK_BYTES + q_bytes + 2 * stages * kv_bytes + 8 * barriers
    # S and O (fp32); overlapped, P (two 16-bit values a register) lives beside them while P·V runs
    regs = bn // 2 + d // 2 + (bn // 4 if overlap_of(config) else 0) + REGISTER_OVERHEAD
    return Tiling(block_m=bm, threads=128 * (consumers + 1), smem_bytes=smem, q_bytes=q_bytes, kv_bytes=kv_bytes,
                  estimated_regs=regs)


def overlap_of(config: Mapping[str, Value]) -> bool:
    """Whether a configuration overlaps a key block's softmax with the previous block's P·V (0 where unnamed)."""
    return bool(int(config.get("overlap", 0)))


def pingpong_of(config: Mapping[str, Value]) -> bool:
    """Whether a configuration's two consumer warpgroups take turns on the tensor cores (0 where unnamed)."""
    return bool(int(config.get("pingpong", 0)))


def _params() -> tuple[Param, ...]:
    return (
        Param("family", (FAMILY,), "categorical",
              "kernel family: fa3 (sm_90a: TMA, wgmma, warp specialisation, FlashAttention-3 style)"),
        Param("block_n", BLOCK_N, doc="keys per pipeline step (one K and one V tile per ring slot)"),
        Param("stages", STAGES, doc="ring slots of K and V tiles in flight (TMA pipeline depth)"),
        Param("consumers", CONSUMERS, doc="consumer warpgroups, 64 query rows each (block_m = 64 x consumers)"),
        Param("overlap", OVERLAP, default=0,
              doc="1: a key block's softmax runs while the previous block's P·V is on the tensor cores (S, O and P "
                  "live at once)"),
        Param("pingpong", PINGPONG, default=0,
              doc="1: the two consumer warpgroups take turns on the tensor cores (one issues its GEMMs while the "
                  "other runs its softmax; named barriers), FlashAttention-3's inter-warpgroup overlap"),
    )


def _rules(problem: AttentionProblem, target: Target, limits: DeviceLimits) -> tuple[Rule, ...]:
    p = problem

    def family_applies(c) -> str | None:
        return applies(p, target)

    def tiles_fit_problem(c) -> str | None:
        bm = ROWS_PER_CONSUMER * c["consumers"]
        for name, size, what, value in (("block_m", p.seq, "seq", bm), ("block_n", p.seq_k, "seq_k", c["block_n"])):
            cap = max(64, next_pow2(size))
            if value > cap:
                detail = f" (consumers={c['consumers']})" if name == "block_m" else ""
                return f"{name}={value}{detail} is larger than {what}={size} needs (at most {cap})"
        return None

    def pipeline_depth(c) -> str | None:
        blocks = -(-p.seq_k // c["block_n"])
        if c["stages"] > 2 and blocks < c["stages"]:
            return f"a {c['stages']}-stage ring needs {c['stages']} key blocks; seq_k={p.seq_k} gives {blocks}"
        return None

    def pingpong_pairs(c) -> str | None:
        if c["pingpong"] and c["consumers"] != 2:
            return (f"pingpong=1 orders the GEMMs of two consumer warpgroups taking turns; consumers={c['consumers']} "
                    "has no second one to take turns with")
        return None

    def resources(c) -> str | None:
        t = tiling(p, c)
        if t.threads > limits.max_threads_per_block:
            return f"{t.threads} threads per block exceed the device's {limits.max_threads_per_block}"
        budget = CONSUMER_REGS[c["consumers"]]
        if t.estimated_regs > budget:
            held = f"S {c['block_n'] // 2}, O {p.head_dim // 2}" + (f", P {c['block_n'] // 4}" if c["overlap"] else "")
            return (f"about {t.estimated_regs} registers per consumer thread ({held}, {REGISTER_OVERHEAD} more) exceed "
                    f"the {budget} a consumer thread can have with {c['consumers']} consumer(s) (255 with one; two get "
                    "232 each from setmaxnreg)")
        if {**{k: c[k] for k in ("block_n", "consumers", "overlap", "pingpong")}, "head_dim": p.head_dim} \
                == SPILLS_WITHOUT_PINGPONG:
            x = SPILLS_WITHOUT_PINGPONG
            return (f"the overlapped schedule without ping-pong at block_n={x['block_n']}, head dim {x['head_dim']} "
                    f"and {x['consumers']} consumers spills registers in ptxas (measured); use pingpong=1, a smaller "
                    "block_n or one consumer")
        if t.smem_bytes > limits.max_shared_per_block_optin:
            return (f"{t.smem_bytes} bytes of shared memory (Q, {c['stages']} K and V tiles of {t.kv_bytes} bytes, "
                    f"barriers) exceed the device's {limits.max_shared_per_block_optin} per block")
        return None

    grid, int32_strides = argument_rules(p)  # fa2's: the kernel ABI is the same
    return (family_applies, tiles_fit_problem, pipeline_depth, pingpong_pairs, grid, int32_strides, resources)


def fa3_space(problem: AttentionProblem, target: Target) -> SearchSpace:
    """The fa3 configurations for `problem` on `target` (limits from the target or its architecture)."""
    return SearchSpace(params=_params(), rules=_rules(problem, target, target.cuda_limits()))


# Hand-picked starting points (block_n, stages, consumers, overlap, pingpong) by head dim, in the order measured on an
# H200 (2026-12-03 19:32 UTC, docs/results/attention_wgmma_h200_2026-12-03_1932.md: B 4 x H 16 x L 4096 and
# B 2 x H 16 x L 16384 at D 128, B 4 x H 32 x L 1024 at D 64): FlashAttention-3's forward tiles with two consumers
# (128 query rows x 128 keys) taking turns (ping-pong: 1.6-11% faster than the same tile without, the 2-stage ring best
# at L 16384, the 3-stage at 4096), then the same tiles without ping-pong, one consumer of 64 x 64 next, the overlapped
# schedules after (where their registers fit: 64 keys for D 128; at D 64 overlap with ping-pong is the fastest), the
# rest last. At D 128 the overlapped ping-pong 128 x 128 tile with three ring slots comes first: admitted on
# 2026-12-07 (it compiles without spilling under setmaxnreg) and measured that day on an H100
# (docs/results/attention_wgmma_h100_2026-12-07.md): 5-6% faster than ping-pong alone at L 4096, causal and not, 7%
# slower at L 16384 causal, where ping-pong alone stays second; its two-slot version was slower everywhere (last of
# the 128 x 128 picks).
_PICKS: dict[int, tuple[tuple[int, int, int, int, int], ...]] = {
    64: ((128, 3, 2, 1, 1), (128, 3, 2, 0, 0), (128, 3, 2, 0, 1), (64, 3, 1, 0, 0), (128, 3, 2, 1, 0), (64, 4, 2, 1, 0),
         (128, 2, 2, 1, 0), (128, 2, 1, 0, 0)),
    128: ((128, 3, 2, 1, 1), (128, 3, 2, 0, 1), (128, 2, 2, 0, 1), (128, 2, 2, 0, 0), (128, 3, 2, 0, 0),
          (128, 2, 2, 1, 1), (64, 2, 1, 0, 0), (64, 3, 2, 1, 0), (64, 3, 2, 0, 0), (128, 2, 1, 1, 0), (64, 3, 2, 1, 1)),
}


def hand_picked(problem: AttentionProblem, target: Target, *, limit: int | None = None) -> list[Config]:
    """The valid _PICKS for `problem`, best guesses first; a pick the shape rejects (too large a block for a short
    sequence, too deep a ring) gives way to its version with one consumer, 64 keys and two stages where that is
    valid (a ping-pong pick keeps its two consumers: it has no one-consumer version)."""
    if applies(problem, target):
        return []
    space = fa3_space(problem, target)
    picks: list[Config] = []
    for bn, stages, consumers, overlap, pingpong in _PICKS[problem.head_dim]:
        for cfg in ({"family": FAMILY, "block_n": bn, "stages": stages, "consumers": consumers, "overlap": overlap,
                     "pingpong": pingpong},
                    {"family": FAMILY, "block_n": min(bn, 64 if problem.seq_k <= 64 else bn), "stages": 2,
                     "consumers": 1 if problem.seq <= 64 else consumers, "overlap": overlap, "pingpong": pingpong}):
            if space.why_invalid(cfg) is None:
                if cfg not in picks:
                    picks.append(cfg)
                break
    return picks[:limit] if limit else picks


def describe(config: Mapping[str, Value]) -> str:
    """A short human label: "fa3 128x128 s2 c2" (block_m x block_n, stages, consumer warpgroups), " ov" overlapped,
    " pp" ping-pong."""
    bm = ROWS_PER_CONSUMER * int(config["consumers"])
    tail = (" ov" if overlap_of(config) else "") + (" pp" if pingpong_of(config) else "")
    return f"fa3 {bm}x{config['block_n']} s{config['stages']} c{config['consumers']}{tail}"
