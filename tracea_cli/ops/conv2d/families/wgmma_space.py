"""The search space of conv2d's Hopper family (families/wgmma.py): convolutions that are a GEMM, run by the GEMM
op's wgmma kernel (kernels/cuda/gemm_wgmma.cuh).

A 1x1 filter at stride 1 without padding or dilation reads each input pixel once: Y[N·H·W, K] = X[N·H·W, C] ·
W[K, C]^T, the GEMM layout nt with M = N·H·W, N = K, K = C (`gemm_view`). Every other convolution needs the
activation gathered (im2col) and stays with the implicit-GEMM families until TMA im2col lands. The space is the GEMM
family's (gemm/families/wgmma_space.py) over that view: the same parameters, the same rules, the same reasons.

`qualifies` says why a problem is not served, before anything compiles: the geometry, the dtype (fp16, bf16, tf32:
the GEMM family's), the target (sm_90), and TMA's alignment (C and K multiples of 16 bytes: X, W and Y are read and
written with 16-byte row strides in place; the GEMM family's staging pre-pass for an unaligned K is not used here).

`hand_picked` gives the configurations for ResNet-50's 1x1 layers at batch 32 (M = 25088, 6272, 1568; K from 64 to
2048). They are chosen by rule, not measured yet (benchmarks/conv2d_hopper_h200.py measures them). Pure: no GPU.
"""

from __future__ import annotations

from typing import Mapping

from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.gemm.families import wgmma_space as gs
from tracea_cli.ops.gemm.problem import GemmProblem
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
ASSUMED_SMS = 132  # an H200's SMs, for a target that does not say how many it has


def is_gemm(problem: Conv2dProblem) -> bool:
    """True for the convolutions that are a GEMM: 1x1 filter, stride 1, no padding, no dilation."""
    p = problem
    return (p.r, p.s, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w) == (1, 1, 1, 1, 0, 0, 1, 1)


def problem_reason(problem: Conv2dProblem) -> str | None:
    """Why the family has no kernel for this problem on any target (None: it has): geometry, dtype, alignment."""
    p = problem
    if not is_gemm(p):
        return (f"the filter is not 1x1 at stride 1 without padding or dilation (r={p.r}, s={p.s}, stride "
                f"{p.stride_h}x{p.stride_w}, pad {p.pad_h}x{p.pad_w}, dilation {p.dilation_h}x{p.dilation_w}): the "
                "wgmma family runs only convolutions that are a GEMM until TMA im2col lands")
    if p.dtype not in DTYPES:
        return f"the wgmma family has no {p.dtype} kernels (it runs {', '.join(DTYPES)})"
    per_row = gs.row_elems(p.dtype)
    for name, value in (("C", p.c), ("K", p.k)):
        if value % per_row:
            return (f"TMA needs {name} to be a multiple of {per_row} for {p.dtype} ({name}={value}: X, W and Y are "
                    "read and written in place with 16-byte row strides)")
    return None


def qualifies(problem: Conv2dProblem, target: Target) -> str | None:
    """None if the family applies to this problem on this target, else why not."""
    if target.backend != "cuda" or not target.arch or base_arch(target.arch) != "sm_90":
        return f"the wgmma family needs an sm_90 target, not {target.arch or target.backend}"
    return problem_reason(problem)


def gemm_view(problem: Conv2dProblem) -> GemmProblem:
    """The GEMM this convolution is: nt, M = N·H·W, N = K, K = C, with the GEMM kernel's epilogue."""
    p = problem
    return GemmProblem(m=p.n * p.h * p.w, n=p.k, k=p.c, dtype=p.dtype, layout="nt",
                       epilogue=EPILOGUE_VIEW[p.epilogue][0])


def post_relu(problem: Conv2dProblem) -> bool:
    return EPILOGUE_VIEW[problem.epilogue][1]


def conv2d_space(problem: Conv2dProblem, target: Target) -> SearchSpace | str:
    """The GEMM family's space over the problem's GEMM view, or why the family does not apply."""
    reason = qualifies(problem, target)
    if reason:
        return reason
    view = gemm_view(problem)
    space = gs.hopper_space(view, target)
    return space if space is not None else (gs.qualifies(view, target) or "the wgmma family does not apply")


def waves(problem: Conv2dProblem, config: Mapping[str, Value], sm_count: int) -> int:
    """Rounds of work items a persistent grid of one CTA per SM walks (clusters of `cluster_m` CTAs)."""
    slots = max(1, (sm_count or ASSUMED_SMS) // int(config["cluster_m"]))
    return gs.ceil_div(gs.work_items(gemm_view(problem), config), slots)


def estimated_cost(problem: Conv2dProblem, config: Mapping[str, Value], sm_count: int) -> float:
    """A wave model the picks are ordered by (lower first): waves x tile area / the tile's assumed throughput."""
    tm, tn = int(config["tile_m"]), int(config["tile_n"])
    rate = next((r for m, n, _, _, r in PICK_TILES if (m, n) == (tm, tn)), 0.5)
    return waves(problem, config, sm_count) * tm * tn / rate


def hand_picked(problem: Conv2dProblem, target: Target, *, limit: int | None = None) -> list[dict[str, Value]]:
    """Configurations for this problem, all valid in its space, best guesses first (the picks for ResNet-50's 1x1
    layers at batch 32: M = 25088, 6272, 1568 rows, K from 64 to 2048).

    Persistent cooperative tiles from PICK_TILES (each with the deepest ring near its own that the reduction and
    shared memory allow, and the largest L2 grouping that changes the order), ordered by `estimated_cost` over the
    target's SMs; the GEMM family's default for the view (measured best at 4096^3 on the H200) among them; then the
    first 128-row pick with B multicast over a cluster of 2, and as pingpong, where valid. Direct stores where there
    is a residual (`_fitted`). Chosen by rule, not measured for convolutions."""
    space = conv2d_space(problem, target)
    if isinstance(space, str):
        return []
    view = gemm_view(problem)
    sm_count = target.cuda_limits().sm_count or 0
    k_blocks = gs.ceil_div(view.k, gs.tile_k(view.dtype))
    tiled: list[dict[str, Value]] = []
    for tm, tn, stages, store, _ in PICK_TILES:
        base: dict[str, Value] = {"family": FAMILY, "tile_m": tm, "tile_n": tn, "stages": stages,
                                  "consumers": 2 if tm >= 128 else 1, "schedule": "cooperative", "cluster_m": 1,
                                  "persistent": 1, "group_m": 8, "store": store}
        config = _fitted(space, base, k_blocks, problem.has_residual)
        if config:
            tiled.append(config)
    default = gs.default_config(view, target)
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
    return picks[:limit] if limit else picks


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
    """A short human label: "wgmma 128x256 s3 c2 cooperative cl1 p1 g8 tma"."""
    return (f"wgmma {config['tile_m']}x{config['tile_n']} s{config['stages']} c{config['consumers']} "
            f"{config['schedule']} cl{config['cluster_m']} p{config['persistent']} g{config['group_m']} "
            f"{config['store']}")
