"""The search space of the CUDA implicit-GEMM conv2d families (families/implicit_gemm.py, kernels/cuda/
conv2d_implicit.cuh): parameters per dtype and the rules that reject a configuration before it is compiled.

Two families on the GEMM engine's tiles: `mma` (mma.sync tensor cores: fp16, bf16, tf32; a cp.async pipeline of 2-4
stages) and `simt` (FMA, exact fp32; double-buffered through registers). A configuration names the block tile of the
implicit GEMM (block_m output pixels x block_n output channels x block_k of the reduction per pipeline step), the warp
tile, the pipeline depth, the vector width of the loads (vec, in elements), the activation iterator (`analytic`,
`optimized`, `few_channels`: how a step's tile of im2col(X) is gathered, see the kernel's header), split-K and the
tile order (group_m).

Rules come from the device's limits (threads, shared memory, registers), from the shape (vector loads need C, or for
few_channels R·S·C, a multiple of the width; tiles no larger than the problem needs; every split-K slice gets work;
a pipeline no deeper than its steps) and from the parameters themselves (warp tiles divide block tiles). Pure: no
GPU, no I/O, no randomness.

`tiling(problem, config)` derives what the kernel template computes from a configuration (threads, shared memory);
the generated source asserts the same figures at compile time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.tile_limits import block_resources, next_pow2
from tracea_cli.space import Config, Param, Rule, SearchSpace, Value
from tracea_cli.target import DeviceLimits, Target

FAMILY = {"fp32": "simt", "tf32": "mma", "fp16": "mma", "bf16": "mma"}
DTYPES = tuple(FAMILY)

BLOCK_MN = (32, 64, 128, 256)
MMA_BLOCK_K = (16, 32, 64)
SIMT_BLOCK_K = (8, 16, 32)
MMA_WARP = (16, 32, 64, 128)
SIMT_WARP_M, SIMT_WARP_N = (16, 32, 64), (32, 64)
MMA_STAGES = (2, 3, 4)
SPLIT_K = (1, 2, 4, 8, 16)
# How split-K's slices are summed: "reduce", three steps (the workspace zeroed, the main kernel adding into it, a
# reduction kernel with the epilogue); "serial", one launch (the last of a tile's slices to arrive finishes the tile
# and zeroes its part of the workspace again: kernels/cuda/conv2d_splitk_serial.cuh); "serial_ordered", the same with
# one part of the workspace per slice, summed in slice order: the same bits on every run
SPLITK_MODES = ("reduce", "serial", "serial_ordered")
SERIAL_MODES = ("serial", "serial_ordered")
# serial split-K is offered for outputs of at most this many elements (N·P·Q·K): where the launches it saves are a
# share of the call worth having (ResNet-50's layers at batch 1 are all within it). Larger problems' cache keys do not
# hash its kernel (families/implicit_gemm.py's template), so they stayed what they were before it existed.
SERIAL_MAX_OUTPUT = 1 << 20
GROUP_M = (1, 4, 8)
ITERATORS = ("analytic", "optimized", "few_channels")
MASK_BITS = 32  # the optimized iterator's filter-row and filter-column masks are 32-bit
REGISTER_OVERHEAD = 48  # addresses, the step cursor, divisors, loop counters and the epilogue
ROW_REGS = {"analytic": 3, "optimized": 4, "few_channels": 3}  # per row of A a thread loads (PixelRow)
SPLITK_REDUCE_THREADS = 256
MIN_MMA_CC = (8, 0)


def vector_widths(dtype: str) -> tuple[int, ...]:
    """Elements per global load, widest first: 16 bytes down to one element."""
    size = get_dtype(dtype).storage_bytes
    widths, w = [], 16 // size
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
    accumulator_regs: int  # 32-bit accumulator registers per thread
    estimated_regs: int
    copy_bytes: int  # bytes of the widest global load (vec x element size)
    a_chunk: int  # elements of A per load (mma few_channels: 16 bytes gathered one by one)


def a_chunk(problem: Conv2dProblem, config: Mapping[str, Value]) -> int:
    """Elements of one load of A, as conv2d_mma's A_CHUNK: vec, or for mma few_channels 16 bytes (at most block_k)."""
    if config["family"] == "mma" and config["iterator"] == "few_channels":
        return min(16 // get_dtype(problem.dtype).storage_bytes, int(config["block_k"]))
    return int(config["vec"])


def tiling(problem: Conv2dProblem, config: Mapping[str, Value]) -> Tiling:
    """Derived sizes; mirrors MmaGemm / SimtGemm (kernels/cuda/gemm_*.cuh) in layout nt and ActivationTile."""
    family = str(config["family"])
    bm, bn, bk = int(config["block_m"]), int(config["block_n"]), int(config["block_k"])
    wm, wn = int(config["warp_m"]), int(config["warp_n"])
    vec = int(config["vec"])
    elem = get_dtype(problem.dtype).storage_bytes
    threads = (bm // wm) * (bn // wn) * 32
    chunk = a_chunk(problem, config)
    rows = -(-bm * bk // (chunk * threads)) * ROW_REGS[str(config["iterator"])]  # registers of the rows of A
    if family == "mma":
        pad = 8  # MmaGemm's PAD_K_ROWS: A as [block_m][block_k + 8], B (nt) as [block_n][block_k + 8]
        smem = int(config["stages"]) * (bm + bn) * (bk + pad) * elem
        acc = wm * wn // 32
        fragments = (wm // 16) * 4 + (wn // 8) * 2
        mma_k = 8 if problem.dtype == "tf32" else 16
        if acc < 128 or bk // mma_k <= 2:  # MmaGemm::PREFETCH: a second set of fragments loads under the products
            fragments *= 2
        estimated = acc + fragments + rows + REGISTER_OVERHEAD
    else:
        smem = 2 * bk * ((bm + 4) + (bn + 4)) * elem
        acc = wm * wn // 32
        lanes_m = 8 if wm > wn else 4
        fragments = 2 * (wm // lanes_m + wn // (32 // lanes_m))
        staging = (-(-bm * bk // (vec * threads)) + -(-bk * bn // (vec * threads))) * vec
        estimated = acc + fragments + staging + rows + REGISTER_OVERHEAD
    return Tiling(family, threads, smem, acc, estimated, vec * elem, chunk)


def serial_offered(problem: Conv2dProblem) -> bool:
    """Whether the serial split-K modes are in the problem's space (its output is small enough, SERIAL_MAX_OUTPUT)."""
    return problem.gemm_m * problem.k <= SERIAL_MAX_OUTPUT


def steps(problem: Conv2dProblem, config: Mapping[str, Value]) -> int:
    """Pipeline steps over the reduction: R·S·ceil(C / block_k) (one tap a step), or ceil(R·S·C / block_k)."""
    bk = int(config["block_k"])
    if config["iterator"] == "few_channels":
        return -(-problem.taps // bk)
    return problem.r * problem.s * -(-problem.c // bk)


def _params(problem: Conv2dProblem) -> tuple[Param, ...]:
    family = FAMILY[problem.dtype]
    simt = family == "simt"
    return (
        Param("family", (family,), "categorical",
              "kernel family: simt (FMA, exact fp32) or mma (mma.sync tensor cores)"),
        Param("block_m", BLOCK_MN, doc="output pixels (N·P·Q) per block"),
        Param("block_n", BLOCK_MN, doc="output channels (K) per block"),
        Param("block_k", SIMT_BLOCK_K if simt else MMA_BLOCK_K, doc="reduction (R·S·C) per pipeline step"),
        Param("warp_m", SIMT_WARP_M if simt else MMA_WARP, doc="output pixels per warp"),
        Param("warp_n", SIMT_WARP_N if simt else MMA_WARP, doc="output channels per warp"),
        Param("stages", (2,) if simt else MMA_STAGES, doc="shared-memory pipeline depth (SIMT double-buffers)"),
        Param("vec", vector_widths(problem.dtype), doc="elements per global load; 1 is the element-wise variant"),
        Param("iterator", ITERATORS, "categorical", "how a step's activations are gathered: analytic, optimized "
              "(precomputed offsets and filter-tap masks), few_channels (taps of a small C, one by one)"),
        Param("split_k", SPLIT_K, doc="slices of the reduction summed in an fp32 workspace"),
        Param("splitk_mode", SPLITK_MODES, "categorical", "how split-K's slices are summed: reduce (workspace zeroed, "
              "main kernel, reduction kernel: three steps), serial (one launch: the tile's last slice finishes it) or "
              "serial_ordered (one launch, a part per slice summed in order: deterministic)", default="reduce"),
        Param("group_m", GROUP_M, doc="tile rows walked column by column (rasterization)"),
    )


def _rules(problem: Conv2dProblem, limits: DeviceLimits) -> tuple[Rule, ...]:
    m, k, c, taps = problem.gemm_m, problem.k, problem.c, problem.taps
    family = FAMILY[problem.dtype]
    smallest_k = min(SIMT_BLOCK_K if family == "simt" else MMA_BLOCK_K)
    elem = get_dtype(problem.dtype).storage_bytes

    def architecture(cfg) -> str | None:
        if cfg["family"] == "mma" and limits.compute_capability < MIN_MMA_CC:
            return (f"mma.sync with cp.async needs compute capability 8.0 or newer, {limits.arch} has "
                    f"{limits.compute_capability[0]}.{limits.compute_capability[1]}")
        return None

    def warp_divides_block(cfg) -> str | None:
        if cfg["block_m"] % cfg["warp_m"] or cfg["block_n"] % cfg["warp_n"]:
            return (f"warp tile {cfg['warp_m']}x{cfg['warp_n']} does not divide block tile "
                    f"{cfg['block_m']}x{cfg['block_n']}")
        return None

    def tile_fits_problem(cfg) -> str | None:
        depth = taps if cfg["iterator"] == "few_channels" else c
        what = "R·S·C" if cfg["iterator"] == "few_channels" else "C"
        for name, size, dim, least in (("block_m", m, "N·P·Q", min(BLOCK_MN)), ("block_n", k, "K", min(BLOCK_MN)),
                                       ("block_k", depth, what, smallest_k)):
            cap = max(least, next_pow2(size))
            if cfg[name] > cap:
                return f"{name}={cfg[name]} is larger than {dim}={size} needs (at most {cap})"
        return None

    def iterator(cfg) -> str | None:
        it = cfg["iterator"]
        if it == "few_channels" and c >= cfg["block_k"]:
            return (f"few_channels is for C smaller than a step: C={c} fills block_k={cfg['block_k']}, which the "
                    "channel iterators load as whole vectors")
        if it == "optimized" and max(problem.r, problem.s) > MASK_BITS:
            return (f"the optimized iterator keeps {MASK_BITS}-bit masks of filter rows and columns; "
                    f"R={problem.r}, S={problem.s}")
        return None

    def aligned_loads(cfg) -> str | None:
        vec = cfg["vec"]
        if vec == 1:
            return None
        if cfg["iterator"] == "few_channels":
            if taps % vec:
                return f"vec={vec} loads of the filter need R·S·C a multiple of {vec}; R·S·C={taps}"
        elif c % vec:
            return f"vec={vec} loads need C a multiple of {vec} (pixels and filter taps start at multiples of C); C={c}"
        return None

    def element_copies(cfg) -> str | None:
        # cp.async moves 4 bytes at least: narrower mma copies go through registers, one 16-bit element at a time.
        if cfg["family"] != "mma" or cfg["vec"] * elem >= 4:
            return None
        row = taps if cfg["iterator"] == "few_channels" else c
        if row % 2 == 0:
            what = "R·S·C" if cfg["iterator"] == "few_channels" else "C"
            return (f"vec={cfg['vec']} copies single 16-bit elements through registers; {what}={row} allows vec=2 "
                    "or wider")
        return None

    def resources(cfg) -> str | None:
        return block_resources(tiling(problem, cfg), cfg, limits)

    def split_k_slices(cfg) -> str | None:
        split = cfg["split_k"]
        if split == 1:
            return None
        total = steps(problem, cfg)
        per_slice = -(-total // split)
        if per_slice * (split - 1) >= total:
            return f"splitting the reduction {split} ways leaves a slice without work: it has {total} steps"
        return None

    def splitk_mode(cfg) -> str | None:
        mode = cfg["splitk_mode"]
        if mode not in SERIAL_MODES:
            return None
        if cfg["split_k"] == 1:
            return f"splitk_mode={mode} sums split-K slices; split_k=1 has none (use splitk_mode=reduce)"
        if not serial_offered(problem):
            return (f"splitk_mode={mode} is offered for outputs of at most {SERIAL_MAX_OUTPUT} elements (N·P·Q·K); "
                    f"this one has {m * k}, where the launches it saves are a small share of the call")
        return None

    def pipeline_depth(cfg) -> str | None:
        per_slice = -(-steps(problem, cfg) // cfg["split_k"])
        if cfg["stages"] > 2 and cfg["stages"] > per_slice + 1:
            return f"a {cfg['stages']}-stage pipeline needs {cfg['stages'] - 1} steps per slice; there are {per_slice}"
        return None

    def grouping(cfg) -> str | None:
        tiles_m = -(-m // cfg["block_m"])
        if cfg["group_m"] > 1 and tiles_m <= cfg["group_m"]:
            return f"group_m={cfg['group_m']} needs more than {cfg['group_m']} rows of tiles; N·P·Q={m} gives {tiles_m}"
        return None

    # Cheap, shape-only rules first: most rejections happen before a tiling is derived.
    return (architecture, warp_divides_block, tile_fits_problem, iterator, aligned_loads, element_copies, grouping,
            split_k_slices, splitk_mode, pipeline_depth, resources)


def conv2d_space(problem: Conv2dProblem, target: Target) -> SearchSpace:
    """The CUDA conv2d configurations for `problem` on `target` (limits from the target or its architecture)."""
    if problem.dtype not in FAMILY:
        raise ValueError(f"the CUDA conv2d kernels do {', '.join(DTYPES)}, not {problem.dtype}")
    limits = target.cuda_limits()
    return SearchSpace(params=_params(problem), rules=_rules(problem, limits))


# Hand-picked starting points: (block_m, block_n, block_k, warp_m, warp_n, stages), best guesses first for large
# layers, then smaller tiles. A pick whose block_n exceeds K's need is skipped (the tile rule), so a layer with K = 64
# starts with the first 64-wide tile.
_PICKS: dict[str, tuple[tuple[int, int, int, int, int, int], ...]] = {
    "mma16": (
        (128, 128, 32, 64, 64, 4),
        (128, 256, 32, 64, 64, 3),
        (256, 128, 32, 64, 64, 3),
        (128, 64, 32, 64, 32, 4),
        (256, 64, 32, 64, 32, 3),
        (64, 64, 64, 32, 32, 4),
        (64, 32, 64, 32, 32, 4),
        (32, 32, 32, 16, 16, 3),
    ),
    "tf32": (
        (128, 128, 16, 64, 64, 4),
        (128, 128, 32, 64, 64, 3),
        (128, 64, 32, 64, 32, 3),
        (64, 64, 32, 32, 32, 4),
        (32, 32, 32, 16, 16, 3),
    ),
    "fp32": (
        (128, 128, 8, 64, 32, 2),
        (128, 64, 8, 64, 32, 2),
        (64, 64, 8, 32, 32, 2),
        (32, 32, 8, 16, 32, 2),
    ),
}
MID_TILE = 64 * 64  # the mid-sized tile offered split over the reduction
SPLIT_FIRST_FRACTION = 4  # its split comes first where its tiles fill fewer than 1/SPLIT_FIRST_FRACTION of the SMs


def _pick_key(dtype: str) -> str:
    return "mma16" if dtype in ("fp16", "bf16") else dtype


def hand_picked(problem: Conv2dProblem, target: Target, *, limit: int | None = None) -> list[Config]:
    """A small list of sensible configurations for `problem`, all valid in its space, best guesses first.

    Each pick is fitted to the shape: few_channels where C is smaller than a step, else the optimized iterator where
    the filter allows it; the widest vector the channels allow; the largest L2 grouping with enough tile rows; a
    shallower pipeline or step where the reduction is short. Where the device's SM count is known, the picks whose
    output tiles fill at least half the SMs come first, largest tile first (measured on the H200,
    docs/results/conv2d_h200.md: the largest tile that still fills the device was the best or within 5% of it on every
    ResNet-50 layer at N = 32); and a mid-sized pick (64 x 64 where there is one) and the smallest are also offered
    split over the reduction, as many slices as keep one wave of blocks: first, where that mid-sized pick's tiles
    fill fewer than a quarter of the SMs (ResNet's last stage at N = 1)."""
    space = conv2d_space(problem, target)
    family = FAMILY[problem.dtype]
    bk_values = space.param("block_k").values

    few = problem.c < max(bk_values)  # few_channels may apply: it gathers element by element, shallow steps suit it

    def first_valid(base: Mapping[str, Value], *, split_k: int = 1) -> Config | None:
        for bk in dict.fromkeys(((min(bk_values),) if few else ()) + (base["block_k"], *bk_values)):
            for it in ("few_channels", "optimized", "analytic"):
                for stages in dict.fromkeys((base["stages"], 3, 2)):
                    for vec in space.param("vec").values:
                        for group_m in (8, 4, 1):
                            cfg = {**base, "block_k": bk, "stages": stages if family == "mma" else 2, "vec": vec,
                                   "iterator": it, "group_m": group_m, "split_k": split_k}
                            if space.why_invalid(cfg) is None:
                                return cfg
        return None

    def tiles(c: Mapping[str, Value]) -> int:
        return -(-problem.gemm_m // int(c["block_m"])) * -(-problem.k // int(c["block_n"]))

    def area(c: Mapping[str, Value]) -> int:
        return int(c["block_m"]) * int(c["block_n"])

    picks: list[Config] = []
    for bm, bn, bk, wm, wn, stages in _PICKS[_pick_key(problem.dtype)]:
        cfg = first_valid({"family": family, "block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn,
                           "stages": stages})
        if cfg is not None and cfg not in picks:
            picks.append(cfg)
    sm_count = (target.limits.sm_count if target.limits else None) or 0
    if picks and sm_count:
        picks.sort(key=lambda c: (tiles(c) * 2 < sm_count, -area(c)))  # stable: the list's order among equals
        mid = min((c for c in picks if area(c) >= MID_TILE), key=area, default=picks[0])
        small = min(picks, key=area)
        split_picks = []
        for base in dict.fromkeys(map(_frozen, (mid, small))):
            base = dict(base)
            for split in reversed([s for s in SPLIT_K[1:] if tiles(base) * s <= sm_count]):
                cfg = first_valid(base, split_k=split)
                if cfg is not None:
                    # the one-launch sum first where it is offered (the same arithmetic, two launches fewer)
                    serial = {**cfg, "splitk_mode": "serial"} if serial_offered(problem) else None
                    split_picks.append([c for c in (serial, cfg) if c is not None and space.why_invalid(c) is None])
                    break
        for i, group in enumerate(split_picks):
            group = [c for c in group if c not in picks]
            if i == 0 and tiles(mid) * SPLIT_FIRST_FRACTION < sm_count:
                picks[0:0] = group
            else:
                picks += group
    return picks[:limit] if limit else picks


def _frozen(config: Mapping[str, Value]) -> tuple:
    return tuple(sorted(config.items()))


def describe(config: Mapping[str, Value]) -> str:
    """A short human label: "mma 128x64x32 w64x32 s4 v8 optimized"."""
    tail = f" split{config['split_k']}" if config["split_k"] != 1 else ""
    if tail and config.get("splitk_mode", "reduce") != "reduce":
        tail += f" {str(config['splitk_mode']).replace('_', '-')}"
    return (f"{config['family']} {config['block_m']}x{config['block_n']}x{config['block_k']} "
            f"w{config['warp_m']}x{config['warp_n']} s{config['stages']} v{config['vec']} {config['iterator']}{tail}")
