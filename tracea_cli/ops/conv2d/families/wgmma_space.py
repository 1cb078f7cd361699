"""The search space of conv2d's Hopper family (families/wgmma.py): convolutions on the GEMM op's wgmma pipeline
(kernels/cuda/gemm_wgmma.cuh), in two forms.

A 1x1 filter at stride 1 without padding or dilation reads each input pixel once: Y[N·H·W, K] = X[N·H·W, C] ·
W[K, C]^T, the GEMM layout nt with M = N·H·W, N = K, K = C (`gemm_view`), run by the GEMM kernel as it is. Every
other convolution runs on the TMA im2col producer (kernels/cuda/conv2d_wgmma_im2col.cuh; host side in
wgmma_im2col.py) where an im2col tensor map can describe it (`wgmma_im2col.why_not`). Either way the space is the
GEMM family's (gemm/families/wgmma_space.py) over a view (`view`): the same parameters, the same rules, the same
reasons; the im2col view's K is its k-steps' width (R·S taps, each in ceil(C / tile_k) channel blocks).

`qualifies` says why a problem is not served, before anything compiles: the dtype (fp16, bf16, tf32: the GEMM
family's), the target (sm_90), TMA's alignment (C and K multiples of 16 bytes: X, W and Y are read and written with
16-byte strides in place; the GEMM family's staging pre-pass is not used here) and, for the im2col form, the map's
limits (traversal strides at most 8, bounding-box corners in [-128, 127], 16-bit im2col offsets).

`hand_picked` gives, for 1x1 stride-1 layers, the configurations chosen by rule for ResNet-50's 1x1 layers at batch
32 (M = 25088, 6272, 1568; K from 64 to 2048); for the im2col form, those benchmarks/conv2d_im2col_check.py measured
best on ResNet-50's 3x3 layers (docs/results/conv2d_im2col_h200_2026-12-03.md). Pure: no GPU.
"""

from __future__ import annotations

from typing import Mapping

from tracea_cli.ops.conv2d.families import wgmma_im2col as im
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma_space as gs
from tracea_cli.ops.gemm.problem import SHAPE_LIMIT as GEMM_SHAPE_LIMIT
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.tile_limits import ASSUMED_SMS
from tracea_cli.space import SearchSpace, Value
from tracea_cli.target import Target, base_arch

FAMILY = gs.FAMILY
DTYPES = gs.DTYPES
# conv2d's epilogue -> the GEMM kernel's (WG_EPILOGUE), and whether a ReLU follows the residual (WG_POST_RELU: the
# one conv2d epilogue the GEMM kernel lacks, added by conv2d's translation unit only: families/wgmma.py)
EPILOGUE_VIEW = {"none": ("none", False), "bias": ("bias", False), "bias_relu": ("bias_relu", False),
                 "bias_silu": ("bias_silu", False), "bias_residual": ("bias_residual", False),
                 "bias_residual_relu": ("bias_residual", True)}
# Tile shapes the picks are made from, with the ring depth each starts from and its store, and the throughput per SM
# the picks ASSUME for it relative to 128 x 256 (not measured for convolutions: smaller tiles re-read more operand
# bytes per FLOP and, with one consumer, hide less latency). benchmarks/conv2d_hopper_h200.py measures the picks.
PICK_TILES = ((128, 256, 3, "tma", 1.0), (128, 192, 4, "tma", 0.95), (128, 128, 4, "tma", 0.85),
              (128, 64, 6, "direct", 0.7), (64, 64, 6, "direct", 0.5))
# The im2col form's picks, from what the H200 measured on ResNet-50's 3x3 layers at N = 32, fp16
# (docs/results/conv2d_im2col_h200_2026-12-03.md): 128x128 s4 tma best where it has work for at least half the SMs
# (four layers, 0.83-0.91x cuDNN), 128x64 s6 direct where 128x128 would leave more than half idle (the two 512-channel
# layers: 0.67x and 0.64x against 0.56x and 0.55x) and where N = 64 (0.86x); 128x256 s3 slower on every layer, so not
# picked; then 64x64 for problems too small for them.
IM2COL_PICKS = ((128, 128, 4, "tma"), (128, 64, 6, "direct"), (64, 64, 4, "direct"))
IM2COL_MIN_FILL = 0.5  # below this share of the SMs busy, 128x64 comes before 128x128 (measured, above)


def is_gemm(problem: Conv2dProblem) -> bool:
    """True for the convolutions that are a GEMM: 1x1 filter, stride 1, no padding, no dilation."""
    p = problem
    return (p.r, p.s, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w) == (1, 1, 1, 1, 0, 0, 1, 1)


def problem_reason(problem: Conv2dProblem) -> str | None:
    """Why the family has no kernel for this problem on any target (None: it has): dtype, alignment and, beyond
    1x1 stride 1, what an im2col tensor map can describe."""
    p = problem
    if p.dtype not in DTYPES:
        return f"the wgmma family has no {p.dtype} kernels (it runs {', '.join(DTYPES)})"
    per_row = gs.row_elems(p.dtype)
    for name, value in (("C", p.c), ("K", p.k)):
        if value % per_row:
            return (f"TMA needs {name} to be a multiple of {per_row} for {p.dtype} ({name}={value}: X, W and Y are "
                    "read and written in place with 16-byte strides)")
    depth = p.c if is_gemm(p) else im.k_blocks(p) * im.tile_k(p.dtype)
    for name, value in (("M = N·P·Q", p.gemm_m), ("K", depth)):
        if value > GEMM_SHAPE_LIMIT:
            return (f"the wgmma family's GEMM view would have {name} = {value}, over the GEMM op's size limit of "
                    f"{GEMM_SHAPE_LIMIT} (split the batch)")
    if is_gemm(p):
        return None
    reason = im.why_not(p, min(t[0] for t in IM2COL_PICKS))
    if reason:
        return (f"{reason}; the wgmma family runs this convolution (r={p.r}, s={p.s}, stride {p.stride_h}x"
                f"{p.stride_w}, pad {p.pad_h}x{p.pad_w}, dilation {p.dilation_h}x{p.dilation_w}) only through TMA "
                "im2col")
    return None


def qualifies(problem: Conv2dProblem, target: Target) -> str | None:
    """None if the family applies to this problem on this target, else why not."""
    if target.backend != "cuda" or not target.arch or base_arch(target.arch) != "sm_90":
        return f"the wgmma family needs an sm_90 target, not {target.arch or target.backend}"
    return problem_reason(problem)


def gemm_view(problem: Conv2dProblem) -> GemmProblem:
    """The GEMM a 1x1 stride-1 convolution is: nt, M = N·H·W, N = K, K = C, with the GEMM kernel's epilogue."""
    p = problem
    return GemmProblem(m=p.n * p.h * p.w, n=p.k, k=p.c, dtype=p.dtype, layout="nt",
                       epilogue=EPILOGUE_VIEW[p.epilogue][0])


def im2col_view(problem: Conv2dProblem) -> GemmProblem:
    """The implicit GEMM the im2col kernel walks, for the space's rules: M = N·P·Q, N = K, and a K of its k-steps'
    width (R·S taps x ceil(C / tile_k) channel blocks x tile_k), so that the rules count its k-steps."""
    p = problem
    return GemmProblem(m=p.gemm_m, n=p.k, k=im.k_blocks(p) * im.tile_k(p.dtype), dtype=p.dtype, layout="nt",
                       epilogue=EPILOGUE_VIEW[p.epilogue][0])


def view(problem: Conv2dProblem) -> GemmProblem:
    """The GEMM view the space and the picks use: `gemm_view` for 1x1 stride 1, else `im2col_view`."""
    return gemm_view(problem) if is_gemm(problem) else im2col_view(problem)


def post_relu(problem: Conv2dProblem) -> bool:
    return EPILOGUE_VIEW[problem.epilogue][1]


def conv2d_space(problem: Conv2dProblem, target: Target) -> SearchSpace | str:
    """The GEMM family's space over the problem's view (`view`), or why the family does not apply."""
    reason = qualifies(problem, target)
    if reason:
        return reason
    over = view(problem)
    space = gs.hopper_space(over, target)
    return space if space is not None else (gs.qualifies(over, target) or "the wgmma family does not apply")


def waves(problem: Conv2dProblem, config: Mapping[str, Value], sm_count: int) -> int:
    """Rounds of work items a persistent grid of one CTA per SM walks (clusters of `cluster_m` CTAs)."""
    slots = max(1, (sm_count or ASSUMED_SMS) // int(config["cluster_m"]))
    return gs.ceil_div(gs.work_items(view(problem), config), slots)


def estimated_cost(problem: Conv2dProblem, config: Mapping[str, Value], sm_count: int) -> float:
    """A wave model the picks are ordered by (lower first): waves x tile area / the tile's assumed throughput."""
    tm, tn = int(config["tile_m"]), int(config["tile_n"])
    rate = next((r for m, n, _, _, r in PICK_TILES if (m, n) == (tm, tn)), 0.5)
    return waves(problem, config, sm_count) * tm * tn / rate


def hand_picked(problem: Conv2dProblem, target: Target, *, limit: int | None = None) -> list[dict[str, Value]]:
    """Configurations for this problem, all valid in its space, best guesses first. Beyond 1x1 stride 1, the im2col
    picks (`im2col_picked`); for 1x1 stride 1, the picks for ResNet-50's 1x1 layers at batch 32 (M = 25088, 6272,
    1568 rows, K from 64 to 2048).

    Persistent cooperative tiles from PICK_TILES (each with the deepest ring near its own that the reduction and
    shared memory allow, and the largest L2 grouping that changes the order), ordered by `estimated_cost` over the
    target's SMs; the GEMM family's default for the view (measured best at 4096^3 on the H200) among them; then the
    first 128-row pick with B multicast over a cluster of 2, and as pingpong, where valid. Direct stores where there
    is a residual (`_fitted`). Chosen by rule, not measured for convolutions."""
    space = conv2d_space(problem, target)
    if isinstance(space, str):
        return []
    sms = target.cuda_limits().sm_count  # None where the target has no device to ask
    if not is_gemm(problem):
        return _with_k_variants(problem, space, im2col_picked(problem, space, sms or ASSUMED_SMS), sms, limit)
    gemm = gemm_view(problem)
    sm_count = sms or 0
    k_blocks = gs.ceil_div(gemm.k, gs.tile_k(gemm.dtype))
    tiled: list[dict[str, Value]] = []
    for tm, tn, stages, store, _ in PICK_TILES:
        base: dict[str, Value] = {"family": FAMILY, "tile_m": tm, "tile_n": tn, "stages": stages,
                                  "consumers": 2 if tm >= 128 else 1, "schedule": "cooperative", "cluster_m": 1,
                                  "persistent": 1, "group_m": 8, "store": store}
        config = _fitted(space, base, k_blocks, problem.has_residual)
        if config:
            tiled.append(config)
    default = gs.default_config(gemm, target)
    if default:
        default = _fitted(space, default, k_blocks, problem.has_residual)
    if default and default not in tiled:
        tiled.append(default)
    picks = sorted(tiled, key=lambda c: estimated_cost(problem, c, sm_count))
    for change in ({"cluster_m": 2}, {"schedule": "pingpong"}):
        variant = next((v for v in (_fitted(space, {**c, **change}, k_blocks, problem.has_residual) for c in picks
                                    if int(c["tile_m"]) == 128) if v), None)
        if variant and variant not in picks:
            picks.append(variant)
    return _with_k_variants(problem, space, picks, sms, limit)


def _with_k_variants(problem: Conv2dProblem, space: SearchSpace, picks: list[dict[str, Value]], sms: int | None,
                limit: int | None) -> list[dict[str, Value]]:
    """`picks` (the first `limit`), where the first's tiles leave SMs idle the first with K split, then as a K pair,
    second (gemm wgmma_space.split_variant, pair_variant): ResNet's late layers at small batch. Unmeasured order:
    by rule."""
    if picks:
        over = view(problem)
        for variant in (gs.pair_variant(space, over, picks[0], sms), gs.split_variant(space, over, picks[0], sms)):
            if variant is not None and variant not in picks:
                picks = [picks[0], variant, *picks[1:]]
    return picks[:limit] if limit else picks


def im2col_picked(problem: Conv2dProblem, space: SearchSpace, sm_count: int) -> list[dict[str, Value]]:
    """The im2col form's picks (IM2COL_PICKS): persistent, cooperative, no cluster, each made valid by `_fitted`
    (the ring no deeper than the k-steps, direct stores beside a residual; the ones no change makes valid left out);
    128x64 first where 128x128 has work items for fewer than IM2COL_MIN_FILL of the `sm_count` SMs (as measured)."""
    picks: list[dict[str, Value]] = []
    for tm, tn, stages, store in IM2COL_PICKS:
        base: dict[str, Value] = {"family": FAMILY, "tile_m": tm, "tile_n": tn, "stages": stages,
                                  "consumers": 2 if tm >= 128 else 1, "schedule": "cooperative", "cluster_m": 1,
                                  "persistent": 1, "group_m": 8, "store": store}
        config = _fitted(space, base, im.k_blocks(problem), problem.has_residual)
        if config and config not in picks:
            picks.append(config)
    shapes = [(int(c["tile_m"]), int(c["tile_n"])) for c in picks]
    if shapes[:2] == [(128, 128), (128, 64)]:
        if gs.work_items(im2col_view(problem), picks[0]) < IM2COL_MIN_FILL * sm_count:
            picks[0], picks[1] = picks[1], picks[0]
    return picks


def _fitted(space: SearchSpace, base: Mapping[str, Value], k_blocks: int, residual: bool) -> dict[str, Value] | None:
    """`base` made valid by the nearest ring depth (no deeper than the reduction needs), the largest grouping that is
    not redundant and, where the TMA store's staging tile leaves too little shared memory, direct stores; None if no
    such change makes it valid. With a residual the store is direct: the GEMM kernel's TMA-store epilogue spills
    beside a residual's loads at 128-row tiles (ptxas, sm_90a: 12-112 bytes), its direct one does not."""
    want = min(int(base["stages"]), max(2, k_blocks))
    stores = ("direct",) if residual else tuple(dict.fromkeys((str(base["store"]), "direct")))
    for store in stores:
        for group in (8, 4, 1):
            for stages in sorted(gs.STAGE_VALUES, key=lambda v: (abs(v - want), -v)):
                config = {**base, "stages": stages, "group_m": group, "store": store}
                if space.why_invalid(config) is None:
                    return config
    return None


def describe(config: Mapping[str, Value]) -> str:
    """A short human label: "wgmma 128x256 s3 c2 cooperative cl1 p1 g8 tma" (and " split5" with K split)."""
    split, pair = gs.split_k_of(config), gs.cluster_k_of(config)
    return (f"wgmma {config['tile_m']}x{config['tile_n']} s{config['stages']} c{config['consumers']} "
            f"{config['schedule']} cl{config['cluster_m']} p{config['persistent']} g{config['group_m']} "
            f"{config['store']}" + (f" split{split}" if split > 1 else "") + (" kpair" if pair > 1 else ""))
