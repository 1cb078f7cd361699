"""The CPU conv2d family: an implicit GEMM around a register-tile micro-kernel, as numba source.

The convolution is the GEMM Y (M×K) = A (M×R·S·C) · Wᵀ with M = N·P·Q output pixels, but A, the unfolded input
(im2col), never exists in memory: the micro-kernel computes each output pixel's (n, p, q) once per tile, and for
every filter tap (r, s) the input pixel it reads, (p·stride_h − pad_h + r·dilation_h, q·stride_w − pad_w +
s·dilation_w), whose C channels are contiguous in NHWC. A tap that falls in the padding reads a row of zeros instead.

    pack the filter once: K in NR-wide strips, each tap-major ((r, s, c) rows of NR channels, zero past K)
    prange over blocks of mb output pixels × nb output channels, one block per thread at a time:
      for each block of cb input channels (the first writes the output, later ones add to it)
        for each NR strip of the block's channels, for each MR tile of its pixels:
          micro-kernel: an MR×NR tile of Y (+)= Σ over taps (r, s) and channels c of the block, in registers
          after the last channel block: the epilogue (bias, activation, residual) on the tile, while it is in cache

SIMD: the micro-kernel uses the CPU runtime's vector vocabulary (backends/numba_simd.py) over one 256-bit register (8
fp32 or 4 fp64 lanes), or 512-bit (16 or 8) where the configuration's `vector` is 64, along the output channels:
MR×(NR/lanes) accumulators stay in vector registers, each input value is broadcast once per tap and channel, each
packed filter row loaded once per MR pixels. Ragged edges (N·P·Q not a multiple of MR, K not of NR): pixels past the
end read zeros, and a tile that overhangs Y is computed into a scratch tile and copied back.

`source` is one module per compiled part of a configuration (dtype, mr, nr, vector); blocks, threads, the geometry
and the epilogue are run-time arguments. The module relies on what the CPU runtime puts in front of it
(backends/cpu.py: numba, numpy as np, njit, prange, the vector vocabulary and `CACHE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.ops.conv2d.families.numba_space import (
    DTYPES,
    STORED_VECTOR,
    VECTOR_BYTES,
    conv2d_space,
    hand_picked,
)
from tracea_cli.ops.conv2d.problem import EPILOGUES, Conv2dProblem
from tracea_cli.ops.launch import CallStep, LaunchPlan
from tracea_cli.ops.numba_family import SILU_SPAN, NumbaFamily, lanes, vector_of
from tracea_cli.space import Value

GENERATOR_VERSION = 2  # bump when the module text changes in a way the templates below do not show
ENTRY = "conv2d"
PARAMS = ("X", "W", "Y", "bias", "residual", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w",
          "mb", "nb", "cb", "epilogue")
NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64}
_NUMBA_TYPES = {"fp32": "float32", "fp64": "float64"}
OUTSIDE = -(1 << 40)  # the row offset of a pixel past N·P·Q: every tap of it falls outside the input


@dataclass(frozen=True)
class KernelSpec:
    """The compile-time part of a configuration: one numba compilation per distinct spec."""

    dtype: str  # fp32 | fp64
    mr: int
    nr: int
    vector: int = VECTOR_BYTES  # bytes of one vector register

    @classmethod
    def of(cls, problem: Conv2dProblem, config: Mapping[str, Value]) -> "KernelSpec":
        return cls(problem.dtype, int(config["mr"]), int(config["nr"]), vector_of(config, STORED_VECTOR))

    @property
    def lanes(self) -> int:
        return lanes(self.dtype, self.vector)

    @property
    def name(self) -> str:
        wide = "" if self.vector == VECTOR_BYTES else f"_v{self.vector}"
        return f"conv2d_{self.dtype}_{self.mr}x{self.nr}{wide}"


def micro_kernel_source(mr: int, nr: int, lanes: int) -> str:
    """Python source of the MR×NR implicit-GEMM micro-kernel, unrolled over the tile; its contract is in the
    generated docstring."""
    nv = nr // lanes
    acc = [[f"c{i}_{v}" for v in range(nv)] for i in range(mr)]
    out = [
        "def micro(x, zeros, wp, w_off, geo, c0, c1, d, d_off, ldd, accumulate, H, W, C, R, S, dil_h, dil_w):",
        f'    """d[{mr}×{nr} tile at d_off, row stride ldd] (+)= Σ over taps (r, s) and channels c0..c1-1 of',
        "    X[pixel's input at the tap, c] · filter[c of the tap, NR channels of the strip at w_off].",
        "",
        "    geo[i] = (n·H, p·stride_h − pad_h, q·stride_w − pad_w) of the tile's pixel i; a tap outside the input reads",
        "    `zeros`. With `accumulate` the tile is added to d; otherwise d is overwritten, never read (it may hold NaN).",
        '    """',
    ]
    for row in acc:
        out.append("    " + " = ".join(row) + f" = vzero(wp, {lanes})")
    for i in range(mr):
        out.append(f"    n{i} = geo[{i}, 0]")
        out.append(f"    h{i} = geo[{i}, 1]")
        out.append(f"    w{i} = geo[{i}, 2]")
    out.append("    for r in range(R):")
    out.append("        for s in range(S):")
    for i in range(mr):
        out.append(f"            hh = h{i} + r * dil_h")
        out.append(f"            ww = w{i} + s * dil_w")
        out.append("            if hh >= 0 and hh < H and ww >= 0 and ww < W:")
        out.append(f"                x{i} = x")
        out.append(f"                o{i} = ((n{i} + hh) * W + ww) * C")
        out.append("            else:")
        out.append(f"                x{i} = zeros")
        out.append(f"                o{i} = 0")
    out.append(f"            t_off = w_off + (r * S + s) * C * {nr}")
    out.append("            for c in range(c0, c1):")
    out.append(f"                bp = t_off + c * {nr}")
    for v in range(nv):
        out.append(f"                b{v} = vload(wp, bp + {v * lanes}, {lanes})")
    for i in range(mr):
        out.append(f"                a = vsplat(x{i}, o{i} + c, {lanes})")
        for v in range(nv):
            out.append(f"                {acc[i][v]} = vfma(a, b{v}, {acc[i][v]})")
    out.append("    if accumulate:")
    for i in range(mr):
        for v in range(nv):
            at = f"d_off + {i} * ldd + {v * lanes}"
            out.append(f"        vstore(d, {at}, vadd(vload(d, {at}, {lanes}), {acc[i][v]}))")
    out.append("    else:")
    for i in range(mr):
        for v in range(nv):
            out.append(f"        vstore(d, d_off + {i} * ldd + {v * lanes}, {acc[i][v]})")
    return "\n".join(out) + "\n"


# ---- the epilogue, chosen at run time per tile (codes: ops/conv2d/problem.EPILOGUES) ------------------------------

_EPILOGUE = '''
@njit(fastmath=FASTMATH, cache=CACHE)
def apply_epilogue(kind, y, ldy, i0, rows, j0, cols, bias, residual):
    """Y[i0:i0+rows, j0:j0+cols] = epilogue(Y) in place; y and residual flat with row stride ldy (= K).

    One branch per tile row, none per element. NaN stays NaN through every activation (a kernel fault must show)."""
    for i in range(i0, i0 + rows):
        row = i * ldy
        if kind == E_BIAS or kind == E_BIAS_RESIDUAL or kind == E_BIAS_RESIDUAL_RELU:
            for j in range(j0, j0 + cols):
                y[row + j] = y[row + j] + bias[j]
        elif kind == E_BIAS_RELU:
            for j in range(j0, j0 + cols):
                v = y[row + j] + bias[j]
                y[row + j] = v if not v < 0 else v * 0
        elif kind == E_BIAS_SILU:
            for j in range(j0, j0 + cols):
                y[row + j] = y[row + j] + bias[j]
            silu_span(y, row + j0, row + j0 + cols)
        if kind == E_BIAS_RESIDUAL:
            for j in range(j0, j0 + cols):
                y[row + j] = y[row + j] + residual[row + j]
        elif kind == E_BIAS_RESIDUAL_RELU:
            for j in range(j0, j0 + cols):
                v = y[row + j] + residual[row + j]
                y[row + j] = v if not v < 0 else v * 0
'''

# ---- the driver ---------------------------------------------------------------------------------------------------
# conv2d(x, w, y, bias, residual, geometry..., mb, nb, cb, epilogue): arrays C-contiguous, X NHWC, W KRSC, Y and
# residual NPQK (residual empty without one, bias too). The runtime sets numba's thread count from the call step.

_DRIVER = '''
@njit(parallel=PARALLEL, fastmath=FASTMATH, cache=CACHE)
def conv2d(x4, w4, y4, bias, residual4, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, mb, nb, cb, epilogue):
    images, H, W, C = x4.shape
    K, R, S = w4.shape[0], w4.shape[1], w4.shape[2]
    P, Q = y4.shape[1], y4.shape[2]
    x, wf, y, residual = x4.reshape(-1), w4.reshape(-1), y4.reshape(-1), residual4.reshape(-1)
    M = images * P * Q
    taps = R * S * C
    strips = (K + NR - 1) // NR
    wp = np.empty(strips * NR * taps, dtype=x.dtype)  # the filter, NR-wide strips of output channels, tap-major
    for st in prange(strips):
        base = st * NR * taps
        for j in range(NR):
            kk = st * NR + j
            if kk < K:
                for t in range(taps):
                    wp[base + t * NR + j] = wf[kk * taps + t]
            else:
                for t in range(taps):
                    wp[base + t * NR + j] = 0
    zeros = np.zeros(C, dtype=x.dtype)
    m_blocks = (M + mb - 1) // mb
    k_blocks = (K + nb - 1) // nb
    for blk in prange(m_blocks * k_blocks):
        # per block, not rows of one array per thread: threads writing neighbouring rows share cache lines, and
        # that false sharing made two threads 5x slower than one
        g = np.empty((MR, 3), dtype=np.intp)  # the current tile's pixels
        tile = np.empty(MR * NR, dtype=x.dtype)  # a tile that overhangs Y
        m0 = (blk // k_blocks) * mb
        m1 = min(M, m0 + mb)
        k0 = (blk % k_blocks) * nb
        k1 = min(K, k0 + nb)
        for c0 in range(0, C, cb):
            c1 = min(C, c0 + cb)
            first = c0 == 0
            for j0 in range(k0, k1, NR):  # k0 and nb are multiples of NR: j0 starts a packed strip
                cols = min(NR, k1 - j0)
                w_off = (j0 // NR) * NR * taps
                for i0 in range(m0, m1, MR):
                    rows = min(MR, m1 - i0)
                    for i in range(MR):
                        if i < rows:  # (n, p, q) of output pixel i0 + i
                            img = (i0 + i) // (P * Q)
                            rest = (i0 + i) - img * (P * Q)
                            p = rest // Q
                            g[i, 0] = img * H
                            g[i, 1] = p * stride_h - pad_h
                            g[i, 2] = (rest - p * Q) * stride_w - pad_w
                        else:
                            g[i, 0] = 0
                            g[i, 1] = OUTSIDE
                            g[i, 2] = OUTSIDE
                    if rows == MR and cols == NR:
                        micro(x, zeros, wp, w_off, g, c0, c1, y, i0 * K + j0, K, not first, H, W, C, R, S, dil_h,
                              dil_w)
                    else:  # the tile overhangs Y: compute it into scratch, copy back what fits
                        micro(x, zeros, wp, w_off, g, c0, c1, tile, 0, NR, False, H, W, C, R, S, dil_h, dil_w)
                        for rr in range(rows):
                            for jj in range(cols):
                                if first:
                                    y[(i0 + rr) * K + j0 + jj] = tile[rr * NR + jj]
                                else:
                                    y[(i0 + rr) * K + j0 + jj] += tile[rr * NR + jj]
                    if c1 == C and epilogue != 0:
                        apply_epilogue(epilogue, y, K, i0, rows, j0, cols, bias, residual)
'''


def module_source(spec: KernelSpec) -> str:
    """The whole module of one spec: constants, micro-kernel, epilogue, driver."""
    codes = "\n".join(f"E_{e.name.upper()} = {e.code}" for e in EPILOGUES)
    return "\n".join([
        f'"""Tracea CPU conv2d {spec.name} (generator {GENERATOR_VERSION}): generated by '
        'ops/conv2d/families/numba.py."""',
        "import math",
        "",
        f"MR = {spec.mr}",
        f"NR = {spec.nr}",
        f"LANES = {spec.lanes}  # elements per vector",
        f"OUTSIDE = {OUTSIDE}",
        'FASTMATH = {"contract"}  # FMAs are explicit (llvm.fma) in the micro-kernel; elsewhere no reassociation',
        'PARALLEL = {"fusion": False}  # packing and computing are two parallel loops in a row: never fuse them',
        codes,
        "",
        "",
        "@njit(fastmath=FASTMATH, cache=CACHE)",
    ]) + "\n" + micro_kernel_source(spec.mr, spec.nr, spec.lanes) + SILU_SPAN + _EPILOGUE + _DRIVER


def signature(dtype: str) -> str:
    """The driver's numba signature: X, W, Y, residual as C-contiguous 4-D arrays, bias a vector, then integers."""
    t = _NUMBA_TYPES[dtype]
    tensor, vector = f"{t}[:, :, :, ::1]", f"{t}[::1]"
    return f"void({tensor}, {tensor}, {tensor}, {vector}, {tensor}, " + ", ".join(["intp"] * 10) + ")"


def numba_launch(problem: Conv2dProblem, config: Mapping[str, Value]) -> LaunchPlan:
    values = {name: int(getattr(problem, name)) for name in ("stride_h", "stride_w", "pad_h", "pad_w", "dilation_h",
                                                             "dilation_w")}
    values |= {"mb": int(config["mb"]), "nb": int(config["nb"]), "cb": int(config["cb"]),
               "epilogue": problem.fused.code}
    return LaunchPlan(steps=(CallStep(ENTRY, signature(problem.dtype), PARAMS, values, int(config["threads"])),),
                      family="numba")


def numba_args(problem: Conv2dProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The host arrays the driver takes (a missing bias or residual as an empty array of the dtype)."""
    dt = NUMPY_DTYPES[problem.dtype]
    return {"X": operands["X"], "W": operands["W"], "Y": operands["Y"],
            "bias": operands["bias"] if problem.has_bias else np.empty(0, dt),
            "residual": operands["residual"] if problem.has_residual else np.empty((0, 0, 0, 0), dt)}


NUMBA = NumbaFamily(DTYPES, conv2d_space, lambda problem, config: module_source(KernelSpec.of(problem, config)),
                    numba_launch, numba_args, hand_picked, Path(__file__))
