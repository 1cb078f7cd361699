"""Host-side arithmetic of conv2d's TMA im2col path (the wgmma family beyond 1x1 stride 1; checked on an H200,
docs/results/conv2d_im2col_h200_2026-12-03.md): the arguments of `cuTensorMapEncodeIm2col` for the activation X,
those of a 3-D tiled map for the filter (and the launch plan's `tensor_maps` that carry them), and the coordinates
and im2col offsets of every k-step's loads, as kernels/cuda/conv2d_wgmma_im2col.cuh computes them on the device.
Pure: no GPU.

The implicit GEMM: row m of A is output pixel (n, p, q), m = (n·P + p)·Q + q; column k of A (and of the filter as B,
K_out x R·S·C) is tap (r, s) and channel c, k = (r·S + s)·C + c. A k-step covers one tap and `tile_k` channels
(one 128-byte swizzle row): tap t = kb // c_blocks, channel block kb % c_blocks, c_blocks = ceil(C / tile_k).

TMA im2col (PTX ISA, "Tensor copy: im2col mode"; CUDA driver API, cuTensorMapEncodeIm2col), as this module models
it (`tma_im2col_rows`): X is a 4-D tensor, innermost first (C, W, H, N). The map fixes a bounding box in the spatial
dimensions, from `lower` to the dimension's last index plus `upper` (W: [lower_w, W - 1 + upper_w]), and
`element_strides` (the traversal stride per dimension). One load names a start (c, w, h, n) and per spatial
dimension an im2col offset; it fills `pixels_per_column` rows of `channels_per_pixel` channels: row i is the i-th
pixel of a walk that starts at (w, h, n) and steps w by stride_w, wrapping past the box's end in W to the box's first
w and the next h (by stride_h), past its end in H to the first h and the next n. Each row holds X[n, h + off_h,
w + off_w, c .. c + channels) with zeros wherever that lies outside X (padding, channels past C, images past N).

With lower = -pad and upper = pad - dilation·(filter - 1), the box's W positions at stride_w are exactly the Q
output columns' first taps (-pad_w + q·stride_w), so the walk from output pixel m0 visits m0, m0 + 1, ... in M's
order, and the offsets (s·dilation_w, r·dilation_h) move every row to tap (r, s): the A tile of rows m0.. and
k-step kb. `direct_rows` enumerates the same tile from the convolution's definition; the tests compare them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.dtypes import get_dtype
from tracea_cli.ops.launch import TensorMap

SWIZZLE_BYTES = 128
MAX_PIXELS = 1024  # cuTensorMapEncodeIm2col: pixelsPerColumn at most 1024 (channelsPerPixel at most 256)
MAX_OFFSET = 1 << 16  # im2col offsets are 16-bit unsigned
# rank -> the bounding box corners' range: 16 bits shared by the spatial dimensions (3-D: 16, 4-D: 8 each, 5-D: 5)
CORNER_RANGE = {3: (-(1 << 15), (1 << 15) - 1), 4: (-128, 127), 5: (-16, 15)}
MAX_TRAVERSAL_STRIDE = 8  # elementStrides are 1..8


@dataclass(frozen=True)
class Im2colMap:
    """The arguments of cuTensorMapEncodeIm2col for X (NHWC), innermost dimension first."""

    dims: tuple[int, int, int, int]  # (C, W, H, N)
    strides_bytes: tuple[int, int, int]  # of dimensions 1..3 (the driver takes rank - 1 strides)
    lower: tuple[int, int]  # pixelBoxLowerCorner (W, H)
    upper: tuple[int, int]  # pixelBoxUpperCorner (W, H)
    channels_per_pixel: int
    pixels_per_column: int
    element_strides: tuple[int, int, int, int]  # (C, W, H, N)
    swizzle: str = "128B"
    oob_fill: str = "zero"  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros


@dataclass(frozen=True)
class FilterMap:
    """A 3-D tiled map over the filter KRSC seen as (C, R·S, K_out), innermost first, so that channels past C in the
    last channel block read zeros instead of the next tap's weights."""

    dims: tuple[int, int, int]
    strides_bytes: tuple[int, int]
    box: tuple[int, int, int]  # (tile_k, 1, tile_n / cluster)


@dataclass(frozen=True)
class KStep:
    """One k-step's loads: the A tile through the im2col map, the B tile through the filter map."""

    kb: int
    r: int
    s: int
    c0: int
    offsets: tuple[int, int]  # im2col offsets (W, H)
    filter_coords: tuple[int, int, int]  # (c0, tap, first output channel): the tile's column n0 is added per tile


def tile_k(dtype: str) -> int:
    return SWIZZLE_BYTES // get_dtype(dtype).storage_bytes


def c_blocks(problem: Conv2dProblem) -> int:
    return -(-problem.c // tile_k(problem.dtype))


def k_blocks(problem: Conv2dProblem) -> int:
    """k-steps per output tile: every tap, each in ceil(C / tile_k) channel blocks."""
    return problem.r * problem.s * c_blocks(problem)


def why_not(problem: Conv2dProblem, tile_m: int) -> str | None:
    """Why the im2col path cannot run this problem with `tile_m`-row tiles (None: it can)."""
    p = problem
    e = get_dtype(p.dtype).storage_bytes
    if (p.c * e) % 16:
        return f"TMA needs C·{e} bytes to be a multiple of 16 (C={p.c}): X's pixel stride"
    if tile_m > MAX_PIXELS:
        return f"an im2col load fills at most {MAX_PIXELS} pixels, not tile_m={tile_m}"
    if max(p.stride_h, p.stride_w) > MAX_TRAVERSAL_STRIDE:
        return f"TMA traversal strides are at most {MAX_TRAVERSAL_STRIDE} (stride {p.stride_h}x{p.stride_w})"
    low, high = CORNER_RANGE[4]
    m = im2col_map(p, tile_m)
    for name, value in (("lower", m.lower), ("upper", m.upper)):
        if not all(low <= v <= high for v in value):
            return (f"the im2col bounding box's {name} corner (W, H) = {value} is outside [{low}, {high}] (padding "
                    "or the filter's dilated span is too large for a 4-D im2col map)")
    if max(p.dilation_w * (p.s - 1), p.dilation_h * (p.r - 1)) >= MAX_OFFSET:
        return "the filter's span does not fit the 16-bit im2col offsets"
    return None


def im2col_map(problem: Conv2dProblem, tile_m: int) -> Im2colMap:
    p = problem
    e = get_dtype(p.dtype).storage_bytes
    return Im2colMap(
        dims=(p.c, p.w, p.h, p.n),
        strides_bytes=(p.c * e, p.w * p.c * e, p.h * p.w * p.c * e),
        lower=(-p.pad_w, -p.pad_h),
        upper=(p.pad_w - p.dilation_w * (p.s - 1), p.pad_h - p.dilation_h * (p.r - 1)),
        channels_per_pixel=tile_k(p.dtype),
        pixels_per_column=tile_m,
        element_strides=(1, p.stride_w, p.stride_h, 1),
    )


def filter_map(problem: Conv2dProblem, tile_n: int, cluster: int = 1) -> FilterMap:
    p = problem
    e = get_dtype(p.dtype).storage_bytes
    return FilterMap(dims=(p.c, p.r * p.s, p.k), strides_bytes=(p.c * e, p.r * p.s * p.c * e),
                     box=(tile_k(p.dtype), 1, tile_n // cluster))


# The sizes the launch plan's maps name (values of `map_sizes`), beside the kernel's own "M", "N", "C", "ldc", ...
X_DIMS = ("C", "x_w", "x_h", "x_n")  # X (NHWC), innermost first
X_STRIDES = ("C", "x_row", "x_image")  # elements between pixels, rows and images of X
W_DIMS = ("C", "w_taps", "N")  # the filter (KRSC) as (C, R·S, K_out)
W_STRIDES = ("C", "w_row")  # elements between taps and output channels of the filter


def map_sizes(problem: Conv2dProblem) -> dict[str, int]:
    """The named sizes and strides (in elements) the tensor maps of `tensor_maps` read."""
    p = problem
    return {"x_w": p.w, "x_h": p.h, "x_n": p.n, "x_row": p.w * p.c, "x_image": p.h * p.w * p.c,
            "w_taps": p.r * p.s, "w_row": p.r * p.s * p.c}


def tensor_maps(problem: Conv2dProblem, config: Mapping[str, Any]) -> dict[str, TensorMap]:
    """The launch plan's maps of X (kind im2col, from `im2col_map`) and the filter (kind tiled3d, from `filter_map`)
    for this configuration's tile_m, tile_n and cluster_m. They read the sizes `map_sizes` and the kernel's "C" and
    "N" give; the encoded values equal `im2col_map`'s and `filter_map`'s (tested)."""
    p = problem
    e = get_dtype(p.dtype).storage_bytes
    xm = im2col_map(p, int(config["tile_m"]))
    fm = filter_map(p, int(config["tile_n"]), int(config["cluster_m"]))
    return {
        "map_x": TensorMap("X", X_DIMS, "", (), p.dtype, e, kind="im2col", strides=X_STRIDES, lower=xm.lower,
                           upper=xm.upper, element_strides=xm.element_strides,
                           channels_per_pixel=xm.channels_per_pixel, pixels_per_column=xm.pixels_per_column),
        "map_w": TensorMap("W", W_DIMS, "", fm.box, p.dtype, e, kind="tiled3d", strides=W_STRIDES),
    }


def tile_start(problem: Conv2dProblem, m0: int) -> tuple[int, int, int]:
    """The im2col load's start (w, h, n) for the tile whose first row is output pixel m0 (the device's divmods)."""
    p = problem
    n, rest = divmod(m0, p.p * p.q)
    pp, q = divmod(rest, p.q)
    return q * p.stride_w - p.pad_w, pp * p.stride_h - p.pad_h, n


def k_step(problem: Conv2dProblem, kb: int) -> KStep:
    p = problem
    tap, cb = divmod(kb, c_blocks(p))
    r, s = divmod(tap, p.s)
    c0 = cb * tile_k(p.dtype)
    return KStep(kb=kb, r=r, s=s, c0=c0, offsets=(s * p.dilation_w, r * p.dilation_h), filter_coords=(c0, tap, 0))


Element = tuple[int, int, int, int] | None  # (n, h, w, c) of X, or None for a zero


def tma_im2col_rows(x_dims: tuple[int, int, int, int], m: Im2colMap, start: tuple[int, int, int, int],
                    offsets: tuple[int, int]) -> list[list[Element]]:
    """The model of one im2col load (module docstring): per shared-memory row, per channel column, the element of X
    (n, h, w, c) it holds or None (zero fill). `x_dims` (C, W, H, N), `start` (c, w, h, n)."""
    C, W, H, N = x_dims
    c0, w, h, n = start
    box_w = (m.lower[0], W - 1 + m.upper[0])
    box_h = (m.lower[1], H - 1 + m.upper[1])
    sw, sh = m.element_strides[1], m.element_strides[2]
    rows = []
    for _ in range(m.pixels_per_column):
        hh, ww = h + offsets[1], w + offsets[0]
        row: list[Element] = []
        for j in range(m.channels_per_pixel):
            c = c0 + j
            inside = 0 <= n < N and 0 <= hh < H and 0 <= ww < W and 0 <= c < C
            row.append((n, hh, ww, c) if inside else None)
        rows.append(row)
        w += sw  # the walk: along W within the box, then H, then N
        if w > box_w[1]:
            w = box_w[0]
            h += sh
            if h > box_h[1]:
                h = box_h[0]
                n += 1
    return rows


def direct_rows(problem: Conv2dProblem, m0: int, kb: int, tile_m: int) -> list[list[Element]]:
    """The A tile of rows m0 .. m0 + tile_m - 1 and k-step kb from the convolution's definition: row m = output pixel
    (n, p, q), column j = tap (r, s) and channel c0 + j, holding X[n, p·stride_h - pad_h + r·dilation_h,
    q·stride_w - pad_w + s·dilation_w, c] or zero (outside X, channels past C, rows past M)."""
    p = problem
    step = k_step(p, kb)
    rows = []
    for m in range(m0, m0 + tile_m):
        n, rest = divmod(m, p.p * p.q)
        pp, q = divmod(rest, p.q)
        h = pp * p.stride_h - p.pad_h + step.r * p.dilation_h
        w = q * p.stride_w - p.pad_w + step.s * p.dilation_w
        row: list[Element] = []
        for j in range(tile_k(p.dtype)):
            c = step.c0 + j
            inside = m < p.gemm_m and 0 <= h < p.h and 0 <= w < p.w and c < p.c
            row.append((n, h, w, c) if inside else None)
        rows.append(row)
    return rows


def device_rows(problem: Conv2dProblem, m0: int, kb: int, tile_m: int) -> list[list[Element]]:
    """What the kernel's load for (m0, kb) fills, by the model: this module's map, start and offsets."""
    mp = im2col_map(problem, tile_m)
    w, h, n = tile_start(problem, m0)
    step = k_step(problem, kb)
    return tma_im2col_rows(mp.dims, mp, (step.c0, w, h, n), step.offsets)


def filter_columns(problem: Conv2dProblem, kb: int, n0: int, tile_n: int) -> list[list[Element]]:
    """The B tile (tile_n output channels x tile_k) the filter map's load for (kb, n0) fills, by index into W (k, r, s,
    c), or None for a zero; a 3-D tiled box reads zeros past each dimension's end."""
    p = problem
    fm = filter_map(problem, tile_n)
    step = k_step(problem, kb)
    c0, tap, _ = step.filter_coords
    C, RS, K = fm.dims
    out = []
    for i in range(tile_n):
        k = n0 + i
        out.append([(k, tap // p.s, tap % p.s, c0 + j) if (k < K and c0 + j < C and tap < RS) else None
                    for j in range(fm.box[0])])
    return out
