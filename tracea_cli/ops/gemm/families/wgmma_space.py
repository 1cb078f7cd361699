"""The search space of the Hopper GEMM family (families/wgmma.py: wgmma + TMA + warp specialisation,
kernels/cuda/gemm_wgmma.cuh).

`hopper_space(problem, target)` is None where the family does not apply: a target that is not sm_90 or a dtype other
than fp16/bf16/tf32. Any M, N and K qualify. Pure: no GPU, no I/O.

Ragged problems run behind a staging pre-pass (`staging`, kernels/cuda/gemm_wgmma_stage.cuh), part of the launch
sequence, because TMA needs 16-byte row strides: a K that is not a multiple of 16 bytes, for which A (and B in the
nt layout) is copied into scratch with a padded leading dimension; an N that is not, in the nn layout, for which B
(K x N) is copied likewise; and tf32 with layout nn (wgmma reads tf32 B K-major only), for which B is transposed
into scratch and the kernel runs as nt. The staging follows from the problem; it is not a search parameter. C is
never staged: where N is not a multiple of 16 bytes (`ragged_n`) the kernel has no tensor map over C, stores its
elements one by one from registers (store=direct; a rule refuses store=tma) and reads bias and residual likewise.

A stage holds one 128-byte-wide slice of K (64 fp16/bf16 or 32 tf32 elements), the width of the 128-byte swizzle
that TMA writes and wgmma reads; `tile_k` is therefore fixed by the dtype, not searched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import Param, SearchSpace, Value
from tracea_cli.target import Target, base_arch

FAMILY = "wgmma"
GROUP_VALUES = (1, 4, 8, 16)
STAGE_VALUES = (2, 3, 4, 5, 6)
DTYPES = ("fp16", "bf16", "tf32")
SWIZZLE_BYTES = 128  # one stage row of A or B; also the width of a C staging chunk
ALIGN_BYTES = 16  # TMA: global base addresses and row strides
MAX_ACCUMULATORS = 128  # fp32 accumulators per consumer thread that leave room for addressing (no spills)
SLACK_BYTES = 1024  # the kernel rounds its shared-memory base up to the swizzle period
STAGED_ROW_BYTES = 128  # staged copies start every row on a 128-byte line (TMA needs 16; its boxes read 128)
SPLIT_K_VALUES = (1, 2, 3, 4, 5, 6, 8)
SPLIT_K_GAIN = 0.9  # a split must shorten the ideal schedule to at most this share of the unsplit one
# What adding one slice's sums into the workspace costs, as reduction depth of the product itself: about 1,500-1,800
# elements of K on the H100 at fp16 (docs/results/conv2d_splitk_late_n1_h100_2026-12-07.md: the five layers split-K
# sped up, 1.02-2.05x), taken lower so that the rule keeps a split it is unsure of for the tuner to measure.
SPLIT_ADD_DEPTH = 1024
REFERENCE_SMS = 132  # H100 SXM and H200: the SMs split-K's rule assumes where the target has no device to ask
# What a K pair's exchange costs (one consumer's fp32 sums through distributed shared memory, added before the
# epilogue), as reduction depth of the product: a margin, not a fit. On the H100 (2026-12-08, ResNet-50's 512-channel
# 3x3 layers at N = 32) pairs and whole tiles differed by the half of K alone, within what two points can tell, so
# the rule refuses only pairs that cannot pay and leaves the rest for the tuner to measure.
PAIR_ADD_DEPTH = 256
# The most accumulators per thread beside which a K pair's exchange builds without spills (ptxas, sm_90a), per store:
# storing from registers, 128 x 256 tiles (128 each) spilled 56 bytes with a ragged N and bias+SiLU, 128 x 192 (96)
# none; through a TMA store, 128 x 192 spilled 56-308 bytes in the im2col kernel, 128 x 128 (64) none
PAIR_MAX_ACCUMULATORS = {"direct": 96, "tma": 64}

PARAMS = (
    Param("family", (FAMILY,), "categorical", "instruction family: wgmma (sm_90a)"),
    Param("tile_m", (64, 128, 256), doc="rows of C per CTA"),
    Param("tile_n", (64, 128, 192, 256), doc="columns of C per CTA (the wgmma N)"),
    Param("stages", STAGE_VALUES, doc="depth of the TMA -> wgmma shared-memory ring"),
    Param("consumers", (1, 2), doc="consumer warpgroups"),
    Param("schedule", ("cooperative", "pingpong"), "categorical",
          "cooperative: consumers split every tile's rows; pingpong: they take whole tiles in turns, one multiplying "
          "while the other runs its epilogue"),
    Param("cluster_m", (1, 2), doc="CTAs per cluster along M; 2 shares each B tile by TMA multicast"),
    Param("persistent", (0, 1), doc="1: one CTA per SM loops over tiles; 0: one tile per CTA"),
    Param("group_m", GROUP_VALUES, doc="tile order: cluster rows walked column by column before moving on"),
    Param("store", ("direct", "tma"), "categorical", "epilogue: registers -> global, or via swizzled shared memory + TMA"),
    Param("split_k", SPLIT_K_VALUES, doc="K slices per output tile, their sums added in an fp32 workspace and the "
          "epilogue applied by a second pass (for problems whose tiles leave SMs idle)", default=1),
    Param("cluster_k", (1, 2), doc="CTAs per output tile, each multiplying its share of K: 2 is a cluster pair whose "
          "halves' sums meet in shared memory (no workspace, no second pass; for problems whose tiles leave SMs idle)",
          default=1),
)

DTYPE_CODES = {"fp16": 0, "bf16": 1, "tf32": 2}


def elem_bytes(dtype: str) -> int:
    return get_dtype(dtype).storage_bytes


def tile_k(dtype: str) -> int:
    """K per pipeline stage: one 128-byte swizzle row."""
    return SWIZZLE_BYTES // elem_bytes(dtype)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def consumer_rows(config: Mapping[str, Value]) -> int:
    """Rows of a tile one consumer warpgroup multiplies: all of them in pingpong, its share when cooperative."""
    tm = int(config["tile_m"])
    return tm if config["schedule"] == "pingpong" else tm // int(config["consumers"])


def smem_bytes(dtype: str, config: Mapping[str, Value]) -> int:
    """Dynamic shared memory the kernel asks for: the ring, C staging (TMA store; one tile per pingpong consumer),
    the mbarriers, and slack for aligning the base to the swizzle period."""
    tm, tn, stages = int(config["tile_m"]), int(config["tile_n"]), int(config["stages"])
    ring = stages * (tm + tn) * SWIZZLE_BYTES
    staging = int(config["consumers"]) * consumer_rows(config) * tn * elem_bytes(dtype) if config["store"] == "tma" else 0
    paired = cluster_k_of(config) > 1
    pair = consumer_rows(config) * tn * 4 if paired else 0  # one consumer's fp32 sums, sent by the other CTA
    return ring + staging + pair + (2 * stages + 2 + int(paired)) * 8 + SLACK_BYTES


def split_k_of(config: Mapping[str, Value]) -> int:
    """The configuration's split_k (1 for one stored before the parameter existed)."""
    return int(config.get("split_k", 1))


def cluster_k_of(config: Mapping[str, Value]) -> int:
    """The configuration's cluster_k (1 for one stored before the parameter existed)."""
    return int(config.get("cluster_k", 1))


def pair_schedule(ctas: int, sms: int, k: int) -> float:
    """`split_schedule` for `ctas` tiles each shared by a K pair: rounds of 2 x ctas CTAs, each a half tile's product
    and the exchange (PAIR_ADD_DEPTH)."""
    return ceil_div(2 * ctas, sms) * (k / 2 + PAIR_ADD_DEPTH) / k


def split_schedule(ctas: int, parts: int, sms: int, k: int) -> float:
    """The length, in waves of whole-tile work, of `ctas` tiles of reduction depth `k` each cut into `parts` K slices
    on `sms` SMs: ceil(ctas * parts / sms) rounds of a slice's product (k / parts) and, split, of its adds into the
    workspace (SPLIT_ADD_DEPTH more)."""
    depth = k / parts + (SPLIT_ADD_DEPTH if parts > 1 else 0)
    return ceil_div(ctas * parts, sms) * depth / k


def threads(config: Mapping[str, Value]) -> int:
    return 128 * (1 + int(config["consumers"]))


def work_items(problem: GemmProblem, config: Mapping[str, Value]) -> int:
    """Work items the kernel walks: one per cluster of vertically adjacent tiles and K slice."""
    tiles_m = ceil_div(problem.m, int(config["tile_m"]))
    tiles_n = ceil_div(problem.n, int(config["tile_n"]))
    return ceil_div(tiles_m, int(config["cluster_m"])) * tiles_n * split_k_of(config)


@dataclass(frozen=True)
class Staging:
    """What the staging pre-pass does for one problem. `pad_a`: A (M x K) is copied into scratch with its leading
    dimension rounded up to `staged_ld_multiple`; `b`: None, "pad" (B copied likewise in its own layout: N x K in nt,
    K x N in nn) or "transpose" (tf32 nn: B, K x N, written N x K with that leading dimension, so that the kernel reads
    it K-major as in nt)."""

    pad_a: bool = False
    b: str | None = None

    @property
    def any(self) -> bool:
        return self.pad_a or self.b is not None

    def covers(self, other: "Staging") -> bool:
        """True when a kernel built with this staging also computes a problem that needs `other` (staging a
        well-aligned operand is correct, only slower)."""
        return (self.pad_a or not other.pad_a) and (other.b is None or other.b == self.b)


def row_elems(dtype: str) -> int:
    """Elements of one 16-byte unit: TMA row strides are multiples of it."""
    return ALIGN_BYTES // elem_bytes(dtype)


def staged_ld_multiple(dtype: str) -> int:
    """Staged leading dimensions are multiples of this many elements (STAGED_ROW_BYTES)."""
    return STAGED_ROW_BYTES // elem_bytes(dtype)


def staging(problem: GemmProblem) -> Staging:
    """The staging pre-pass this problem needs (Staging() when the kernel reads the operands in place): B's rows
    have K elements in layout nt and N in layout nn."""
    unaligned_k = problem.k % row_elems(problem.dtype) != 0
    if problem.dtype == "tf32" and problem.layout == "nn":
        b: str | None = "transpose"
    elif unaligned_k if problem.layout == "nt" else ragged_n(problem):
        b = "pad"
    else:
        b = None
    return Staging(pad_a=unaligned_k, b=b)


def ragged_n(problem: GemmProblem) -> bool:
    """True where C's rows (N elements) are not a multiple of 16 bytes: TMA cannot store C, and the epilogue moves
    single elements (a pair of them may start at an odd address)."""
    return problem.n % row_elems(problem.dtype) != 0


def qualifies(problem: GemmProblem, target: Target) -> str | None:
    """None if the family applies to this problem on this target, else why not."""
    if target.backend != "cuda" or not target.arch or base_arch(target.arch) != "sm_90":
        return f"the wgmma family needs an sm_90 target, not {target.arch or target.backend}"
    if problem.dtype not in DTYPES:
        return f"the wgmma family has no {problem.dtype} kernels"
    return None


def hopper_space(problem: GemmProblem, target: Target) -> SearchSpace | None:
    """The family's space for this problem and target, or None where it does not apply (see `qualifies`)."""
    if qualifies(problem, target) is not None:
        return None
    limits = target.cuda_limits()
    dtype = problem.dtype
    k_blocks = ceil_div(problem.k, tile_k(dtype))
    group_values = GROUP_VALUES

    def schedule(c: Mapping[str, Value]) -> str | None:
        if c["schedule"] == "pingpong" and int(c["consumers"]) != 2:
            return "pingpong alternates two consumer warpgroups (consumers=2)"
        return None

    def slabs_split(c: Mapping[str, Value]) -> str | None:
        if c["schedule"] == "cooperative" and int(c["tile_m"]) % (64 * int(c["consumers"])):
            return f"tile_m={c['tile_m']} cannot give each of {c['consumers']} consumer warpgroups whole 64-row slabs"
        return None

    def accumulators(c: Mapping[str, Value]) -> str | None:
        acc = consumer_rows(c) * int(c["tile_n"]) // 128
        if acc > MAX_ACCUMULATORS:
            return f"each consumer thread would hold {acc} fp32 accumulators (at most {MAX_ACCUMULATORS} fit)"
        return None

    def shared_memory(c: Mapping[str, Value]) -> str | None:
        need = smem_bytes(dtype, c)
        if need > limits.max_shared_per_block_optin:
            return f"needs {need} bytes of shared memory, over the {limits.max_shared_per_block_optin}-byte limit"
        return None

    def fits_problem(c: Mapping[str, Value]) -> str | None:
        if int(c["tile_m"]) > 64 * ceil_div(problem.m, 64):
            return f"tile_m={c['tile_m']} is larger than M={problem.m} needs"
        if int(c["tile_n"]) > 64 * ceil_div(problem.n, 64):
            return f"tile_n={c['tile_n']} is larger than N={problem.n} needs"
        if int(c["stages"]) > max(2, k_blocks):
            return f"stages={c['stages']} exceeds the {k_blocks} K-blocks of the problem"
        return None

    def c_store(c: Mapping[str, Value]) -> str | None:
        if c["store"] == "tma" and ragged_n(problem):
            return (f"store=tma needs C's rows to be a multiple of 16 bytes; N={problem.n} is not a multiple of "
                    f"{row_elems(dtype)} (store=direct writes C from registers)")
        return None

    def cluster(c: Mapping[str, Value]) -> str | None:
        if int(c["cluster_m"]) > 1 and ceil_div(problem.m, int(c["tile_m"])) < 2:
            return "cluster_m=2 needs at least two tile rows"
        return None

    sms = limits.sm_count or REFERENCE_SMS

    def split(c: Mapping[str, Value]) -> str | None:
        parts = int(c["split_k"])
        if parts == 1:
            return None
        if c["store"] == "tma":
            return f"split_k={parts} adds the slices' sums into a workspace from registers: store=direct only"
        per = ceil_div(k_blocks, parts)
        if per * (parts - 1) >= k_blocks:
            return f"splitting K {parts} ways leaves a slice without work: K={problem.k} has {k_blocks} K-blocks"
        ctas = work_items(problem, {**c, "split_k": 1}) * int(c["cluster_m"])
        whole, sliced = split_schedule(ctas, 1, sms, problem.k), split_schedule(ctas, parts, sms, problem.k)
        if sliced > SPLIT_K_GAIN * whole:
            return (f"{ctas} CTAs of whole tiles take {whole:g} wave(s) of the {sms} SMs; in {parts} slices, with "
                    f"their adds into the workspace, {sliced:.2f}: not shorter by a tenth, so split_k={parts} is slower")
        return None

    def pair(c: Mapping[str, Value]) -> str | None:
        if cluster_k_of(c) == 1:
            return None
        if c["schedule"] != "cooperative" or int(c["consumers"]) != 2:
            return "cluster_k=2 sends one consumer warpgroup's rows to the other CTA: cooperative with consumers=2 only"
        if int(c["cluster_m"]) != 1 or split_k_of(c) != 1:
            return "cluster_k=2 makes the cluster a K pair: cluster_m=1 and split_k=1 only"
        if int(c["persistent"]):
            return "cluster_k=2 runs one tile per CTA pair: persistent=0 only"
        if k_blocks < 2:
            return f"cluster_k=2 halves the K-blocks, and K={problem.k} has one"
        most, held = PAIR_MAX_ACCUMULATORS[str(c["store"])], consumer_rows(c) * int(c["tile_n"]) // 128
        if held > most:
            return (f"cluster_k=2 with store={c['store']} spills registers above {most} accumulators per thread "
                    f"(tile_n={c['tile_n']} has {held})")
        ctas = work_items(problem, c)
        whole, paired = split_schedule(ctas, 1, sms, problem.k), pair_schedule(ctas, sms, problem.k)
        if paired > SPLIT_K_GAIN * whole:
            return (f"{ctas} CTAs of whole tiles take {whole:g} wave(s) of the {sms} SMs; as K pairs, with the "
                    f"exchange, {paired:.2f}: not shorter by a tenth, so cluster_k=2 is slower")
        return None

    def tile_order(c: Mapping[str, Value]) -> str | None:
        # Group sizes at or past the number of cluster rows all give the same order: keep the smallest of them.
        rows = ceil_div(ceil_div(problem.m, int(c["tile_m"])), int(c["cluster_m"]))
        i = group_values.index(c["group_m"])
        if i > 0 and int(group_values[i - 1]) >= rows:
            return f"group_m={c['group_m']} orders {rows} cluster rows the same as group_m={group_values[i - 1]}"
        return None

    return SearchSpace(params=PARAMS,
                       rules=(schedule, slabs_split, accumulators, shared_memory, fits_problem, c_store, cluster,
                              split, pair, tile_order))


def default_config(problem: GemmProblem, target: Target) -> dict[str, Value] | None:
    """A configuration that did well on the H200 for large problems, made valid for this one; None if none is.

    Each tile has its measured ways to store C, preferred first; the first that fits shared memory with its whole
    ring is taken. A TMA store stages C in shared memory (4-byte C for tf32: twice 16-bit's), so where that staging
    would cost ring stages C is stored from registers with the deeper ring instead. Only where no way fits whole is
    the ring made shallower."""
    space = hopper_space(problem, target)
    return None if space is None else _default_in(space, problem)


def _default_in(space: SearchSpace, problem: GemmProblem) -> dict[str, Value] | None:
    """`default_config` in `space`, the problem's Hopper space (see there)."""
    coop = {"consumers": 2, "schedule": "cooperative", "cluster_m": 1, "persistent": 1}
    # Measured on the H200 (docs/hopper-notes.md, docs/results/gemm_hopper_h200.md): 128x256 with 3 stages and a TMA
    # store for 16-bit C, with 4 stages storing from registers for tf32; 128x192, 4 stages where N is a multiple of
    # 192 but not of 256 (fewer idle SMs in the last wave).
    wide = ({**coop, "tile_m": 128, "tile_n": 256}, (("tma", 3), ("direct", 4)))
    if problem.n % 256 and problem.n % 192 == 0:
        wide = ({**coop, "tile_m": 128, "tile_n": 192}, (("tma", 4), ("direct", 4)))
    preferred = [
        wide,
        ({**coop, "tile_m": 128, "tile_n": 128}, (("tma", 4), ("direct", 4))),
        ({**coop, "tile_m": 128, "tile_n": 64}, (("direct", 4),)),
        ({**coop, "tile_m": 64, "tile_n": 64, "consumers": 1, "persistent": 0}, (("direct", 2),)),
    ]
    if ragged_n(problem):  # C is written from registers
        preferred = [(base, tuple(("direct", stages) for _store, stages in ways)) for base, ways in preferred]

    def first_valid(base: Mapping[str, Value], ways) -> dict[str, Value] | None:
        for group in (8, 16, 4, 1):
            for store, stages in ways:
                config = {"family": FAMILY, **base, "store": store, "stages": stages, "group_m": group}
                if space.why_invalid(config) is None:
                    return config
        return None

    for base, ways in preferred:
        config = first_valid(base, ways)  # a whole ring first, with any of the tile's stores...
        if config is None:  # ...else the preferred store with the nearest ring that fits
            store, stages = ways[0]
            config = first_valid(base, [(store, s) for s in sorted(STAGE_VALUES, key=lambda s: abs(s - stages))])
        if config is not None:
            return config
    return None


def split_variant(space: SearchSpace, problem: GemmProblem, config: Mapping[str, Value],
                  sms: int | None) -> dict[str, Value] | None:
    """`config` with K split where `space` (the problem's) allows it: the split with the shortest ideal schedule on
    `sms` SMs (`split_schedule`; the fewer slices on a tie), storing from registers; None where no split is valid."""
    ctas = work_items(problem, dict(config, split_k=1)) * int(config["cluster_m"])
    valid = [dict(config, split_k=parts, store="direct") for parts in SPLIT_K_VALUES[1:]]
    valid = [c for c in valid if space.why_invalid(c) is None]
    if not valid:
        return None
    return min(valid, key=lambda c: (split_schedule(ctas, int(c["split_k"]), sms or REFERENCE_SMS, problem.k),
                                     c["split_k"]))


PAIR_TILES = ((128, 128), (128, 192), (128, 256))  # the 128-row tiles a K pair is tried with, beside the config's own


def pair_variant(space: SearchSpace, problem: GemmProblem, config: Mapping[str, Value],
                 sms: int | None) -> dict[str, Value] | None:
    """`config` as a K pair (cluster_k=2: cooperative, two consumers, one tile per CTA pair, no split_k or B
    multicast) where `space` allows it, with its own tile or a 128-row one (PAIR_TILES), each with the ring depth
    nearest the config's, its store or else a direct one, and a tile order that is not redundant: of those valid, the
    one with the least tile area per SM over its rounds of CTAs on `sms` SMs, the larger tile on a tie; None where
    none is valid."""
    pair = {"consumers": 2, "schedule": "cooperative", "cluster_m": 1, "persistent": 0, "split_k": 1, "cluster_k": 2}
    stages = sorted(STAGE_VALUES, key=lambda s: (abs(s - int(config["stages"])), -s))
    valid = []
    for tm, tn in dict.fromkeys(((int(config["tile_m"]), int(config["tile_n"])), *PAIR_TILES)):
        candidates = ({**config, **pair, "tile_m": tm, "tile_n": tn, "store": store, "stages": s, "group_m": g}
                      for store in dict.fromkeys((config["store"], "direct")) for g in (config["group_m"], 8, 4, 1)
                      for s in stages)
        found = next((c for c in candidates if space.why_invalid(c) is None), None)
        if found is not None:
            valid.append(found)
    if not valid:
        return None

    def load(c: Mapping[str, Value]) -> tuple[int, int]:
        area = int(c["tile_m"]) * int(c["tile_n"])
        return ceil_div(2 * work_items(problem, c), sms or REFERENCE_SMS) * area, -area

    return min(valid, key=load)


def suggested_configs(problem: GemmProblem, target: Target) -> list[dict[str, Value]]:
    """The tuner's first Hopper configurations: `default_config`, then (where the problem's tiles leave SMs idle) the
    same with K split (`split_variant`), then its measured runners-up on the H200 (the sweep of
    docs/results/gemm_hopper_h200.md, 4096³ bf16: the same tile in 2-CTA clusters; storing from registers with 4
    stages, tf32's winner; 128x128 tiles in ping-pong with 5 stages, the best of the narrower tiles), each only where
    valid, so that a short tune (the bench suite's budget of 16) spends its first batch in the family's neighbourhood
    of known good kernels."""
    space = hopper_space(problem, target)
    first = None if space is None else _default_in(space, problem)
    if first is None:
        return []
    variants = [first, {**first, "cluster_m": 2}, {**first, "store": "direct", "stages": 4},
                {**first, "tile_m": 128, "tile_n": 128, "consumers": 2, "schedule": "pingpong", "stages": 5,
                 "persistent": 1}]
    out: list[dict[str, Value]] = []
    for config in variants:
        if config not in out and space.why_invalid(config) is None:
            out.append(config)
    sms = target.cuda_limits().sm_count
    # a problem whose tiles leave SMs idle: the default with K split, then as a K pair, come second
    for variant in (pair_variant(space, problem, first, sms), split_variant(space, problem, first, sms)):
        if variant is not None and variant not in out:
            out.insert(1, variant)
    return out
