"""The search space of the CUDA engine's two template families (families/engine.py): parameters per dtype and the
rules that reject a configuration before it is compiled.

Two kernel families (kernels/cuda/): `simt` (fp32 exact, fp64) and `mma` (fp16, bf16, tf32 on mma.sync; fp32 too, as
3xTF32: each operand split into a big and a small tf32 part and three products per step, fp32's accuracy on tensor
cores). A configuration names the block tile (block_m, block_n, block_k), the warp tile (warp_m, warp_n), the pipeline
depth (stages), split-K, the tile order (group_m: rows of tiles walked column by column, for L2 reuse) and the vector
width of the global loads (vec, in elements; 16 bytes at most, 1 for the predicated element-wise variant). The mma
family adds sliced K (slice_k: groups of warps inside a block, each multiplying its share of every pipeline step,
their sums added in shared memory) for a few rows of C; a configuration stored before slice_k existed lacks it and
means 1. Where the rows of A or B are not a multiple of some vector width (K odd, or N in layout nn), `stage` = 1
copies those operands into padded scratch first (kernels/cuda/gemm_stage_pad.cuh) so that vec > 1 applies; 0 (the
default, and the meaning of a configuration stored before the parameter) reads them in place.

Rules come from the device's limits (threads, shared memory, registers), from the shape (vector loads need rows
whose length is a multiple of the width; tiles no larger than the problem needs; every split-K slice gets work) and
from the parameters themselves (warp tiles divide block tiles). Pure: no GPU, no I/O, no randomness.

`tiling(problem, config)` derives what the kernel template computes from a configuration (threads, shared memory);
the generated source asserts the same figures at compile time, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.tile_limits import block_resources, next_pow2
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value
from tracea_cli.target import DeviceLimits, Target

FAMILY = {"fp32": "simt", "fp64": "simt", "tf32": "mma", "fp16": "mma", "bf16": "mma"}  # each dtype's own family
# Every family with kernels for a dtype: fp32 runs on mma.sync too, as 3xTF32 (MmaGemm's PASSES = 3).
FAMILIES: dict[str, tuple[str, ...]] = {**{dtype: (family,) for dtype, family in FAMILY.items()},
                                        "fp32": ("simt", "mma")}
TF32_OPERANDS = ("tf32", "fp32")  # dtypes whose mma kernels take m16n8k8 tf32 steps (fp32 as 3xTF32)

BLOCK_MN = (32, 64, 128, 256)
SLICED_BLOCK_M = (16, *BLOCK_MN)  # 16-row blocks where K is sliced: no padded rows for M <= 16
GROUP_M = (1, 4, 8, 16)
SIMT_BLOCK_K = (8, 16, 32)
MMA_BLOCK_K = (16, 32, 64, 128, 256)
DEEP_BLOCK_K = 128  # steps at least this deep only with sliced K (one grid of warps keeps too many addresses live)
MMA_SHALLOW_BLOCK_K = tuple(bk for bk in MMA_BLOCK_K if bk < DEEP_BLOCK_K)
SLICE_K = (1, 2, 4, 8)
# slice_k came after configurations were stored (tuning caches, profiles/defaults): one without it means 1, the kernel
# it named before.
SLICE_K_DEFAULT = 1
CLUSTER_K = (1, 2, 4)  # blocks of a thread-block cluster sharing a tile's K (sm_90), sums added through DSMEM
MIN_CLUSTER_CC = (9, 0)
SLICED_K_MAX_M = 128  # sliced K (and steps that deep) only for a few rows of C, where output tiles are too few
SIMT_WARP_M, SIMT_WARP_N = (16, 32, 64), (32, 64)
MMA_WARP = (16, 32, 64, 128)
MMA_STAGES = (2, 3, 4, 5)
SPLIT_K = (1, 2, 4, 8, 16)
SMALL_M = 64  # at most this many rows: a GEMM bound by reading B (decoding a few tokens)
SMALL_M_WAVES = 4  # blocks per SM a small-M pick aims for
REGISTER_OVERHEAD = 40  # addresses, loop counters and the epilogue, beside accumulators and fragments
SIMT_PREFETCH_REGS = 176  # SimtGemm::PREFETCH: accumulators + two fragment sets at most this many registers
SPLITK_REDUCE_THREADS = 256
STAGE_DEFAULT = 0  # read the operands in place (what a configuration without `stage` means)
STAGED_PICK_MIN_WORK = 1 << 27  # multiply-adds (512^3) from which hand-picks stage unaligned rows for wider loads
STAGED_ROW_BYTES = 128  # staged rows start on multiples of this (it must divide 256 elements: gemm_stage_pad.cuh)
# The simt family's GEMV-class kernel (kernels/cuda/gemm_gemv.cuh) for fp32 with at most GEMV_MAX_M rows: `kernel`
# picks it ("gemv") or the tiled kernel ("tiled", what a configuration without the parameter means). Its block_m is
# the rows of C a block holds (all of M where block_m >= M, so that B is read once), its block_k the rows of B a
# 256-thread block reads per step; it has no warp tiles (warp_m, warp_n stay at their smallest values).
GEMV_MAX_M = 16
GEMV_ROWS = (1, 2, 4, 8, 16)
GEMV_BLOCK_K = (64, 128)  # deeper steps than the tiled kernel's, offered beside SIMT_BLOCK_K where gemv applies
GEMV_THREADS = 256
GEMV_REDUCTION_BYTES = 16384  # the block's sum of its K groups, a round of rows at a time (GemvGemm::RED_ROWS)
KERNEL_DEFAULT = "tiled"
# How the gemv kernel sums its K slices (only where the space offers gemv): "sum", a second launch (gemm_splitk_sum,
# what a configuration without the parameter means), or "serial", one launch: the last slice of each column block to
# arrive adds the slices' parts in slice order and applies the epilogue (kernels/cuda/gemm_gemv_serial.cuh). Both
# add the same numbers in the same order: the same bits.
SPLITK_MODES = ("sum", "serial")
SPLITK_MODE_DEFAULT = "sum"
# Whether the gemv kernel loads the next step's B into a second set of registers while it multiplies this one's (only
# where the space offers gemv): 0 (what a configuration without the parameter means) or 1.
PREFETCH_DEFAULT = 0
MIN_MMA_CC = (8, 0)  # cp.async, bf16 and tf32 mma.sync


def mma_passes(dtype: str) -> int:
    """Tensor-core products per instruction step of the mma family: 3 for fp32 (3xTF32), 1 otherwise."""
    return 3 if dtype == "fp32" else 1


def vector_widths(dtype: str) -> tuple[int, ...]:
    """Elements per global load, widest first: 16 bytes down to one element."""
    size = get_dtype(dtype).storage_bytes
    widths = []
    w = 16 // size
    while w >= 1:
        widths.append(w)
        w //= 2
    return tuple(widths)


@dataclass(frozen=True)
class Tiling:
    """What a configuration makes of its kernel: block size, shared memory, a register estimate."""

    family: str
    threads: int
    smem_bytes: int  # dynamic shared memory of the main kernel
    accumulator_regs: int  # 32-bit registers of accumulators per thread
    estimated_regs: int  # accumulators + fragments + staging + overhead, per thread
    elem_bytes: int
    copy_bytes: int  # bytes per global load (vec · element size)


def cluster_k_of(config: Mapping[str, Value]) -> int:
    """Blocks of a K cluster; 1 for configurations without the parameter (stored before it, or SIMT)."""
    return int(config.get("cluster_k", 1))


def slice_k_of(config: Mapping[str, Value]) -> int:
    """The configuration's K-slices of warps (1 where it predates the parameter or its family has none)."""
    return int(config.get("slice_k", SLICE_K_DEFAULT))


def kernel_of(config: Mapping[str, Value]) -> str:
    """The simt family's kernel: "tiled", or "gemv" for a few rows of C ("tiled" where the parameter is absent)."""
    return str(config.get("kernel", KERNEL_DEFAULT))


def splitk_mode(config: Mapping[str, Value]) -> str:
    """How a gemv configuration that splits K sums its slices: "sum" (two launches, the default) or "serial"."""
    return str(config.get("splitk_mode", SPLITK_MODE_DEFAULT))


def gemv_prefetch(config: Mapping[str, Value]) -> int:
    """1 where the gemv kernel loads the next step's B while it multiplies this one's, else 0."""
    return int(config.get("prefetch", PREFETCH_DEFAULT))


def shown_config(config: Mapping[str, Value]) -> Mapping[str, Value]:
    """The configuration as its source names it: splitk_mode "sum" and prefetch 0 are the configuration that did not
    name them (the same instantiation as before the parameters existed)."""
    quiet = {"splitk_mode": SPLITK_MODE_DEFAULT, "prefetch": PREFETCH_DEFAULT}
    return {k: v for k, v in config.items() if k not in quiet or v != quiet[k]}


def stage_of(config: Mapping[str, Value]) -> int:
    """1 where the configuration copies unaligned operands into padded scratch first; 0 where it lacks `stage`."""
    return int(config.get("stage", STAGE_DEFAULT))


def offers_staging(problem: GemmProblem) -> bool:
    """Whether the space has `stage`: some row of A or B (K elements; N of B in layout nn) is not a multiple of the
    widest vector width. Elsewhere the space, and every configuration's key, stay as they were."""
    widest = vector_widths(problem.dtype)[0]
    return problem.k % widest != 0 or (problem.layout == "nn" and problem.n % widest != 0)


@dataclass(frozen=True)
class EngineStaging:
    """Which operands a configuration copies into padded scratch before the main kernel: A where K is not a
    multiple of vec; B where its rows (K in nt, N in nn) are not."""

    a: bool = False
    b: bool = False

    @property
    def any(self) -> bool:
        return self.a or self.b


def b_rows_cols(problem: GemmProblem) -> tuple[str, str]:
    """B's (rows, cols) as stored, by size name: K x N in layout nn, N x K in nt."""
    return ("K", "N") if problem.layout == "nn" else ("N", "K")


def staging(problem: GemmProblem, config: Mapping[str, Value]) -> EngineStaging:
    if not stage_of(config):
        return EngineStaging()
    vec = int(config["vec"])
    b_row = problem.sizes()[b_rows_cols(problem)[1].lower()]
    return EngineStaging(a=problem.k % vec != 0, b=b_row % vec != 0)


def gemv_k_groups(config: Mapping[str, Value]) -> int:
    """Threads of a GEMV block that share a column of C, each taking its own rows of every step of B."""
    return GEMV_THREADS // max(1, int(config["block_n"]) // int(config["vec"]))


def _gemv_tiling(problem: GemmProblem, config: Mapping[str, Value]) -> Tiling:
    """Mirrors GemvGemm (kernels/cuda/gemm_gemv.cuh)."""
    rows, bn, bk, vec = (int(config[p]) for p in ("block_m", "block_n", "block_k", "vec"))
    elem = get_dtype(problem.dtype).storage_bytes
    red_rows = min(rows, 16 // vec)
    smem = max(2 * bk * rows * elem, GEMV_THREADS * red_rows * vec * elem)
    acc = rows * vec
    staging = max(1, bk // max(1, gemv_k_groups(config))) * vec  # the step's B values, all in flight
    staging *= 1 + gemv_prefetch(config)  # and the next step's, with prefetch
    return Tiling(family="simt", threads=GEMV_THREADS, smem_bytes=smem, accumulator_regs=acc,
                  estimated_regs=acc + staging + min(rows, 4) + REGISTER_OVERHEAD, elem_bytes=elem,
                  copy_bytes=vec * elem)


def tiling(problem: GemmProblem, config: Mapping[str, Value]) -> Tiling:
    """Derived sizes; mirrors the constants of MmaGemm / SimtGemm / GemvGemm in kernels/cuda/."""
    family = str(config["family"])
    if family == "simt" and kernel_of(config) == "gemv":
        return _gemv_tiling(problem, config)
    bm, bn, bk = int(config["block_m"]), int(config["block_n"]), int(config["block_k"])
    wm, wn = int(config["warp_m"]), int(config["warp_n"])
    vec = int(config["vec"])
    elem = get_dtype(problem.dtype).storage_bytes
    words = max(1, elem // 4)  # 32-bit registers per value (fp64: 2)
    threads = (bm // max(wm, 1)) * (bn // max(wn, 1)) * 32
    if family == "mma":
        tf32 = problem.dtype in TF32_OPERANDS
        pad_k_rows, pad_n_rows = 8, (4 if tf32 else 8)
        lda_s = bk + pad_k_rows
        b_rows, ldb_s = (bk, bn + pad_n_rows) if problem.layout == "nn" else (bn, bk + pad_k_rows)
        pipeline = int(config["stages"]) * (bm * lda_s + b_rows * ldb_s) * elem
        slices = slice_k_of(config)
        # the other K-slices' or cluster blocks' fp32 sums, for slice 0 of block 0 (MmaGemm::REDUCTION_BYTES)
        reduction = (max(slices, cluster_k_of(config)) - 1) * bm * bn * 4
        smem = max(pipeline, reduction)
        threads *= slices
        acc = wm * wn // 32
        fragments = (wm // 16) * 4 + (wn // 8) * 2
        if mma_passes(problem.dtype) == 3:  # 3xTF32: big and small fragments, each pipeline step's own sums
            acc, fragments = 2 * acc, 2 * fragments
        staging = 0
    else:
        smem = 2 * bk * ((bm + 4) + (bn + 4)) * elem
        acc = (wm * wn // 32) * words
        lanes_m = 8 if wm > wn else 4  # the lane grid: 4 x 8, or 8 x 4 for warp tiles taller than wide
        fragments = (wm // lanes_m + wn // (32 // lanes_m)) * words  # a lane's column of A and row of B
        if acc + 2 * fragments <= SIMT_PREFETCH_REGS:  # PREFETCH: a second set loads while the first multiplies
            fragments *= 2
        loads = -(-bm * bk // (vec * max(threads, 1))) + -(-bk * bn // (vec * max(threads, 1)))
        staging = loads * vec * words
    return Tiling(
        family=family,
        threads=threads,
        smem_bytes=smem,
        accumulator_regs=acc,
        estimated_regs=acc + fragments + staging + REGISTER_OVERHEAD,
        elem_bytes=elem,
        copy_bytes=vec * elem,
    )


def has_gemv(problem: GemmProblem) -> bool:
    """Whether the simt family offers its GEMV-class kernel for `problem` (fp32, at most GEMV_MAX_M rows)."""
    return problem.dtype == "fp32" and problem.m <= GEMV_MAX_M


def _params(problem: GemmProblem, limits: DeviceLimits, family: str) -> tuple[Param, ...]:
    simt = family == "simt"
    sliced = problem.m <= SLICED_K_MAX_M  # elsewhere the space keeps the size it had before sliced K
    clusters = limits.compute_capability >= MIN_CLUSTER_CC
    gemv = has_gemv(problem) and simt  # elsewhere no `kernel` parameter: the space of before
    block_m = GEMV_ROWS + BLOCK_MN if gemv else SLICED_BLOCK_M if sliced and not simt else BLOCK_MN
    block_k = SIMT_BLOCK_K + GEMV_BLOCK_K if gemv else SIMT_BLOCK_K if simt else MMA_BLOCK_K if sliced \
        else MMA_SHALLOW_BLOCK_K
    return (
        Param("family", (family,), "categorical", "kernel family: simt (FMA) or mma (mma.sync tensor cores)"),
        *((Param("kernel", ("tiled", "gemv"), "categorical", default=KERNEL_DEFAULT,
                 doc=f"simt kernel: tiled, or gemv (fp32, M at most {GEMV_MAX_M}: B read once, K split)"),
           Param("splitk_mode", SPLITK_MODES, "categorical", default=SPLITK_MODE_DEFAULT,
                 doc="how the gemv kernel sums its K slices: sum (a second launch) or serial (one launch: the last "
                     "slice of a column block sums the slices in order)"),
           Param("prefetch", (0, 1), "categorical", default=PREFETCH_DEFAULT,
                 doc="gemv: 1 loads the next step's B into a second set of registers while this step's are "
                     "multiplied"))
          if gemv else ()),
        Param("block_m", block_m, doc="rows of C per block"),
        Param("block_n", BLOCK_MN, doc="columns of C per block"),
        Param("block_k", block_k, doc="depth of one pipeline step"),
        Param("warp_m", SIMT_WARP_M if simt else MMA_WARP, doc="rows of C per warp"),
        Param("warp_n", SIMT_WARP_N if simt else MMA_WARP, doc="columns of C per warp"),
        Param("stages", (2,) if simt else MMA_STAGES, doc="shared-memory pipeline depth (SIMT double-buffers)"),
        Param("split_k", (1,) if problem.dtype == "fp64" else SPLIT_K, doc="slices of K summed in an fp32 workspace"),
        Param("group_m", GROUP_M, doc="tile rows walked column by column (rasterization)"),
        Param("vec", vector_widths(problem.dtype), doc="elements per global load; 1 is the predicated variant"),
        *(() if simt else (Param("slice_k", SLICE_K if sliced else (SLICE_K_DEFAULT,), default=SLICE_K_DEFAULT,
                                 doc=f"groups of warps sharing each pipeline step's K (M at most {SLICED_K_MAX_M})"),
                           Param("cluster_k", CLUSTER_K if sliced and clusters else (1,), default=1,
                                 doc="blocks of a cluster splitting K, sums added through DSMEM (sm_90)"))),
        *((Param("stage", (0, 1), "categorical", default=STAGE_DEFAULT,
                 doc="1: copy the operands whose rows vec does not divide into padded scratch first"),)
          if offers_staging(problem) else ()),
    )


def _rules(problem: GemmProblem, limits: DeviceLimits, family: str) -> tuple[Rule, ...]:
    m, n, k = problem.m, problem.n, problem.k
    params = {p.name: p for p in _params(problem, limits, family)}
    # a tile may exceed a small dimension up to the size of the common smallest tile (32 rows stay valid for M = 16)
    smallest = {"block_m": min(BLOCK_MN), "block_n": min(BLOCK_MN),
                "block_k": min(int(v) for v in params["block_k"].values)}

    def gemv_shape(c) -> str | None:
        # The two simt kernels' own values of the shared parameters (only where the space offers gemv).
        if kernel_of(c) != "gemv":
            if c["block_m"] < min(BLOCK_MN):
                return f"block_m={c['block_m']} is a gemv block (rows of C held by one block); tiled blocks are " \
                       f"{min(BLOCK_MN)} rows at least"
            if c["block_k"] > max(SIMT_BLOCK_K):
                return f"block_k={c['block_k']} is a gemv step; tiled steps are {max(SIMT_BLOCK_K)} deep at most"
            return None
        if problem.layout != "nn":
            return "the gemv kernel reads rows of B along N (layout nn); layout nt takes the tiled kernel"
        if c["block_m"] > max(GEMV_ROWS):
            return f"gemv holds at most {max(GEMV_ROWS)} rows of C per block (block_m={c['block_m']})"
        if c["block_m"] > next_pow2(m):
            return f"gemv block_m={c['block_m']} holds more rows than M={m} needs (at most {next_pow2(m)})"
        if (c["warp_m"], c["warp_n"]) != (min(SIMT_WARP_M), min(SIMT_WARP_N)):
            return f"gemv has no warp tiles: warp_m and warp_n stay {min(SIMT_WARP_M)} and {min(SIMT_WARP_N)}"
        if c["group_m"] != 1:
            return "gemv walks its tiles in row order: group_m must be 1"
        if c["block_n"] // c["vec"] > GEMV_THREADS:
            return f"gemv needs block_n/vec at most {GEMV_THREADS} (one column of vectors per thread)"
        groups = gemv_k_groups(c)
        if c["block_k"] % groups:
            return (f"gemv block_k={c['block_k']} must be a multiple of its {groups} K groups "
                    f"({GEMV_THREADS} threads / (block_n={c['block_n']} / vec={c['vec']}))")
        return None

    def gemv_splitk_mode(c) -> str | None:
        if splitk_mode(c) == SPLITK_MODE_DEFAULT:
            return None
        if kernel_of(c) != "gemv":
            return (f"splitk_mode={c['splitk_mode']} is the gemv kernel's one-launch split-K; the tiled kernel sums "
                    "its slices with atomics and a reduction pass (use splitk_mode=sum)")
        if c["split_k"] == 1:
            return f"splitk_mode={c['splitk_mode']} sums K slices; split_k=1 has none (use splitk_mode=sum)"
        return None

    def gemv_prefetch_rule(c) -> str | None:
        if gemv_prefetch(c) and kernel_of(c) != "gemv":
            return "prefetch=1 is the gemv kernel's; the tiled kernel double-buffers its steps in shared memory " \
                   "(use prefetch=0)"
        return None

    def warp_divides_block(c) -> str | None:
        if kernel_of(c) == "gemv":
            return None
        if c["block_m"] % c["warp_m"] or c["block_n"] % c["warp_n"]:
            return f"warp tile {c['warp_m']}x{c['warp_n']} does not divide block tile {c['block_m']}x{c['block_n']}"
        return None

    def tile_fits_problem(c) -> str | None:
        for name, size, dim in (("block_m", m, "M"), ("block_n", n, "N"), ("block_k", k, "K")):
            cap = max(smallest[name], next_pow2(size))
            if c[name] > cap:
                return f"{name}={c[name]} is larger than {dim}={size} needs (at most {cap})"
        return None

    def architecture(c) -> str | None:
        if c["family"] == "mma" and limits.compute_capability < MIN_MMA_CC:
            return f"mma.sync with cp.async needs compute capability 8.0 or newer, {limits.arch} has " \
                   f"{limits.compute_capability[0]}.{limits.compute_capability[1]}"
        return None

    def aligned_rows(c) -> str | None:
        vec, stage = c["vec"], stage_of(c)
        if stage and (vec == 1 or kernel_of(c) == "gemv"):
            return ("stage=1 pads rows for vector loads of the tiled kernel: "
                    + ("vec=1 reads them in place" if vec == 1 else "the gemv kernel reads its operands in place"))
        unaligned = ""
        if vec > 1 and k % vec:
            unaligned = f"K to be a multiple of {vec} (rows of A{' and B' if problem.layout == 'nt' else ''}); K={k}"
        elif vec > 1 and problem.layout == "nn" and n % vec:
            unaligned = f"N to be a multiple of {vec} (rows of B); N={n}"
        if stage and not unaligned:
            return f"stage=1 copies rows that vec={vec} reads in place already (use stage=0)"
        if unaligned and not stage:
            return (f"vec={vec} loads need {unaligned}"
                    + (" (or stage=1: padded copies first)" if "stage" in params and kernel_of(c) != "gemv" else ""))
        return None

    def element_copies(c) -> str | None:
        # cp.async moves 4 bytes at least: narrower mma copies go one 16-bit element at a time through registers,
        # slow to run and, on large tiles, 15-25 s for ptxas. Kept only for rows that allow nothing wider.
        if c["family"] != "mma" or c["vec"] * get_dtype(problem.dtype).storage_bytes >= 4:
            return None
        if k % 2 == 0 and (problem.layout == "nt" or n % 2 == 0):
            return (f"vec={c['vec']} copies single 16-bit elements through registers; K={k}"
                    f"{'' if problem.layout == 'nt' else f' and N={n}'} allow vec=2 (4-byte copies) or wider")
        return None

    def resources(c) -> str | None:
        return block_resources(tiling(problem, c), c, limits)

    def cluster(c) -> str | None:
        blocks = cluster_k_of(c)
        if blocks == 1:
            return None
        if limits.compute_capability < MIN_CLUSTER_CC:
            return f"cluster_k={blocks} needs thread-block clusters (compute capability 9.0), {limits.arch} has none"
        if c["split_k"] > 1:
            return f"cluster_k={blocks} splits K itself: split_k must be 1"
        return None

    def split_k_slices(c) -> str | None:
        split = c["split_k"] * cluster_k_of(c)
        if split == 1:
            return None
        steps = -(-k // c["block_k"])
        per_slice = -(-steps // split)
        if per_slice * (split - 1) >= steps:
            return (f"splitting K {split} ways leaves a slice without work: K={k} has {steps} steps of "
                    f"block_k={c['block_k']}")
        return None

    def pipeline_depth(c) -> str | None:
        steps = -(-k // c["block_k"])
        per_slice = -(-steps // (c["split_k"] * cluster_k_of(c)))
        if c["stages"] > 2 and c["stages"] > per_slice + 1:
            return (f"a {c['stages']}-stage pipeline needs {c['stages'] - 1} steps per slice; "
                    f"K={k} gives {per_slice} of block_k={c['block_k']}")
        return None

    def sliced_k(c) -> str | None:
        slices = slice_k_of(c)
        if slices == 1:
            if c["block_k"] >= DEEP_BLOCK_K:
                return (f"block_k={c['block_k']} needs slice_k > 1: one group of warps takes steps up to "
                        f"{DEEP_BLOCK_K // 2} deep")
            return None
        instruction_k = 8 if problem.dtype in TF32_OPERANDS else 16
        steps = c["block_k"] // instruction_k
        if steps % slices:
            return (f"slice_k={slices} must divide the {steps} instruction steps (k={instruction_k}) of "
                    f"block_k={c['block_k']}")
        return None

    def grouping(c) -> str | None:
        tiles_m = -(-m // c["block_m"])
        if c["group_m"] > 1 and tiles_m <= c["group_m"]:
            return f"group_m={c['group_m']} needs more than {c['group_m']} rows of tiles; M={m} gives {tiles_m}"
        return None

    # Cheap, shape-only rules first: most rejections happen before a tiling is derived.
    if family == "simt":
        shape = (gemv_shape, gemv_splitk_mode, gemv_prefetch_rule) if has_gemv(problem) else ()
        return (architecture, *shape, warp_divides_block, tile_fits_problem, aligned_rows, grouping, split_k_slices,
                pipeline_depth, resources)
    return (architecture, warp_divides_block, tile_fits_problem, aligned_rows, element_copies, grouping, sliced_k,
            cluster, split_k_slices, pipeline_depth, resources)


def gemm_space(problem: GemmProblem, target: Target, family: str | None = None) -> SearchSpace:
    """The space of one family's CUDA GEMM configurations for `problem` on `target` (limits from the target or its
    architecture); the dtype's own family (FAMILY) unless `family` names another of FAMILIES."""
    family = family or FAMILY[problem.dtype]
    if family not in FAMILIES[problem.dtype]:
        raise ValueError(f"the {family} family has no {problem.dtype} kernels")
    limits = target.cuda_limits()
    return SearchSpace(params=_params(problem, limits, family), rules=_rules(problem, limits, family))


# Hand-picked starting points: (block_m, block_n, block_k, warp_m, warp_n, stages), best first for large squares
# (measured on an H200 at 4096^3, docs/engine.md), then smaller tiles for smaller problems.
_PICKS: dict[str, tuple[tuple[int, int, int, int, int, int], ...]] = {
    "mma16": (
        (128, 256, 32, 64, 64, 4),
        (128, 256, 32, 64, 64, 3),
        (256, 128, 32, 64, 64, 3),
        (128, 128, 64, 64, 64, 3),
        (128, 128, 32, 64, 64, 5),
        (128, 128, 32, 64, 64, 4),
        (128, 128, 64, 64, 32, 3),
        (128, 256, 64, 64, 64, 3),
        (64, 128, 64, 32, 64, 4),
        (64, 64, 32, 32, 32, 4),
        (32, 32, 32, 16, 16, 3),
    ),
    "tf32": (
        (128, 128, 16, 64, 64, 4),
        (256, 128, 16, 64, 64, 3),
        (128, 256, 16, 64, 64, 3),
        (128, 128, 16, 64, 64, 5),
        (128, 128, 32, 64, 64, 3),
        (128, 128, 32, 32, 64, 3),
        (64, 128, 32, 32, 64, 3),
        (128, 128, 32, 64, 32, 3),
        (64, 64, 32, 32, 32, 3),
        (32, 32, 32, 16, 16, 3),
    ),
    # fp32 on mma.sync (3xTF32): warp tiles of 32 x 64 at most (each step's own sums double the accumulators); deep
    # steps first (measured on an H100 at 2048^3 and 4096^3, docs/results/gemm_fp32_x3_h100_2026-12-07.md)
    "fp32x3": (
        (128, 128, 32, 64, 32, 4),
        (128, 128, 32, 64, 32, 3),
        (128, 128, 32, 32, 64, 3),
        (64, 128, 32, 32, 64, 3),
        (128, 128, 16, 64, 32, 4),
        (64, 64, 32, 32, 32, 3),
        (32, 32, 32, 16, 16, 3),
    ),
    "fp32": (
        (128, 128, 8, 64, 32, 2),
        (128, 128, 8, 32, 64, 2),
        (128, 128, 8, 64, 64, 2),  # 8 x 16 per lane: the densest loop (90% FFMA), two blocks of 4 warps per SM
        (256, 128, 8, 64, 64, 2),
        (128, 128, 16, 64, 32, 2),
        (64, 64, 8, 32, 32, 2),
        (128, 256, 8, 64, 64, 2),
        (128, 64, 8, 64, 32, 2),
        (32, 32, 8, 16, 32, 2),
    ),
    "fp64": (
        (64, 64, 8, 32, 32, 2),
        (128, 64, 8, 32, 32, 2),
        (64, 128, 8, 32, 64, 2),
        (32, 32, 8, 16, 32, 2),
    ),
}


def _pick_key(dtype: str, family: str) -> str:
    if family == "mma":
        return {"fp32": "fp32x3", "tf32": "tf32"}.get(dtype, "mma16")
    return dtype


def hand_picked(problem: GemmProblem, target: Target, *, limit: int | None = None,
                family: str | None = None) -> list[Config]:
    """A small, fixed list of sensible configurations for `problem`, all valid in its space, best guesses first.

    Each pick is fitted to the shape: the widest vector width the rows allow (on problems of STAGED_PICK_MIN_WORK
    multiply-adds or more, with padded copies of rows it does not divide: fp32 4095x4097x4091 on an H100 ran in
    3.47 ms so, 4.25 ms reading in place one element at a time), the largest L2 grouping that has enough tile rows,
    and (for short K) a shallower step or pipeline. When the grid would leave most SMs idle and K is deep, the first pick is also offered with split-K.
    """
    family = family or FAMILY[problem.dtype]
    space = gemm_space(problem, target, family)
    bk_values = space.param("block_k").values
    # {} where the space has no `stage`; else in place first, then staged (large problems only)
    stages_of_rows: tuple[dict[str, Value], ...] = ({},)
    if "stage" in space.names:
        large = problem.m * problem.n * problem.k >= STAGED_PICK_MIN_WORK
        stages_of_rows = ({"stage": 0}, {"stage": 1}) if large else ({"stage": 0},)
    picks: list[Config] = []

    def first_valid(base: Mapping[str, Value], *, split_k: int = 1) -> Config | None:
        for bk in dict.fromkeys((base["block_k"], *bk_values)):
            for stages in dict.fromkeys((base["stages"], 3, 2)):
                for vec in space.param("vec").values:
                    for rows in stages_of_rows:
                        for group_m in (8, 4, 1):
                            c = space.complete({**base, "block_k": bk, "stages": stages if family == "mma" else 2,
                                                "vec": vec, "group_m": group_m, "split_k": split_k, **rows})
                            if space.why_invalid(c) is None:
                                return c
        return None

    for bm, bn, bk, wm, wn, stages in _PICKS[_pick_key(problem.dtype, family)]:
        base = {"family": family, "block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn,
                "stages": stages}
        c = first_valid(base)
        if c is not None and c not in picks:
            picks.append(c)
    sm_count = (target.limits.sm_count if target.limits else None) or 0
    if picks and sm_count and problem.dtype != "fp64":
        lead = picks[0]
        tiles = -(-problem.m // int(lead["block_m"])) * -(-problem.n // int(lead["block_n"]))
        fitting = [s for s in SPLIT_K[1:] if tiles * s <= sm_count]  # slices that still fit in one wave
        for split in reversed(fitting):
            c = first_valid(lead, split_k=split)
            if c is not None:
                picks.append(c)
                break
    if problem.m <= SMALL_M and sm_count and problem.dtype != "fp64":
        # A few rows of C: the run streams B once and is bound by memory bandwidth, so what matters is enough bytes
        # of B in flight on every SM. Narrow tiles, split K until the grid covers the SMs several times over.
        base = {"family": family, "block_m": 32, "block_n": 64, "block_k": 64 if family == "mma" else 16,
                "warp_m": 32 if family == "mma" else 16, "warp_n": 32, "stages": 4}
        tiles = -(-problem.n // 64)
        split = next((s for s in SPLIT_K if tiles * s >= SMALL_M_WAVES * sm_count), SPLIT_K[-1])
        small = [first_valid(base, split_k=split)]
        if family == "mma":
            # Better, in one launch: 32-column tiles (one block per SM for N = 4096), each pipeline step 512 bytes
            # deep (256 16-bit elements) and shared by K-slices of warps, 5 stages: 64 KiB of B in flight per SM
            # (docs/engine.md, "Small M: sliced K"). Measured fastest on the H200 (docs/results/gemm_small_m_h200.md):
            # up to 16 rows, 16-row blocks of one 16 x 32 warp tile in 8 K-slices; up to 32 rows, 16 x 32 warp tiles
            # in 4 K-slices (8 warps).
            rows = 16 if problem.m <= 16 else 32 if problem.m <= 32 else 64
            depth = 512 // get_dtype(problem.dtype).storage_bytes
            sliced = {"family": family, "block_m": rows, "block_n": 32, "block_k": depth,
                      "warp_m": 32 if rows == 64 else 16, "warp_n": 32, "stages": 4 if rows == 64 else 5}
            order = (4, 8, 2) if rows == 32 else (8, 4, 2)
            fitting = (first_valid({**sliced, "slice_k": s}) for s in order)
            small.insert(0, next((c for c in fitting if c is not None), None))
            if rows == 16 and problem.dtype in ("fp16", "bf16") and 2 in space.param("cluster_k").values:
                # Better still on sm_90 (measured for fp16 and bf16): 64-column tiles, so that B is read in 128-byte
                # pieces, with K split across a cluster of two blocks (docs/engine.md, "Small M: K clusters").
                small.insert(0, first_valid({**sliced, "block_n": 64, "slice_k": 4, "cluster_k": 2}))
        if family == "simt" and has_gemv(problem) and problem.layout == "nn":
            # fp32, at most 16 rows: the GEMV-class kernel reads B once with every row of C in one block, 128
            # columns a block, K split until the grid covers the SMs several times over (512 blocks for N = 4096).
            # Compiled for sm_90 without spills: 64 registers for one row (block_k 64), 128 for 16 rows (block_k 32).
            rows = min(max(GEMV_ROWS), next_pow2(problem.m))
            gemv = {"family": family, "kernel": "gemv", "block_m": rows, "block_n": 128,
                    "block_k": 64 if rows <= 4 else 32, "warp_m": min(SIMT_WARP_M), "warp_n": min(SIMT_WARP_N),
                    "stages": 2}
            tiles_n = -(-problem.n // 128)
            split = next((s for s in SPLIT_K if tiles_n * s >= SMALL_M_WAVES * sm_count), SPLIT_K[-1])
            pick = first_valid(gemv, split_k=split) or first_valid(gemv)
            small.insert(0, pick)
            if pick is not None and int(pick["split_k"]) > 1:
                # the one-launch sum first: the same arithmetic and bits, without the second launch and the gap
                # between the two (docs/engine.md, "GEMV: split-K in one launch")
                small.insert(0, {**pick, "splitk_mode": "serial"})
        for c in reversed(small):
            if c is not None and c not in picks:
                picks.insert(0, c)
    return picks[:limit] if limit else picks
