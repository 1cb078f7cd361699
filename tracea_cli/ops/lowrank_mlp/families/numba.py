"""The CPU lowrank-mlp family: two-phase blocking around the GEMM family's register-tile micro-kernel, as numba source.

    pack U once into NR-wide strips of its rank columns, V once into NR-wide strips of its d_out columns (zero past
    the edge; either layout), in parallel
    prange over blocks of mb rows of x, one block per thread at a time:
      phase 1: T (mb × rank, the thread's own buffer) = x rows · U, over d_in in kc-deep passes (the first writes T,
               later ones add), every MR×NR tile of T in registers
      phase 2: for each NR strip of V, for each MR rows of T: the MR×NR tile of y = T · V strip in registers,
               stored; then the epilogue (bias, activation, residual) over the block's rows of y while they are
               in L2, whole rows at a time (a tile's row is one vector: per tile, the calls cost more than the work)

T never leaves the thread's block: it is read back from L1/L2 by phase 2 right after phase 1 wrote it. It is kept
in the accumulator's type (fp32 or fp64; the problem's `intermediate` makes no difference on the CPU). The
micro-kernel and the strip packing are the GEMM family's (ops/gemm/families/numba.py) over the CPU runtime's vector
vocabulary (backends/numba_simd.py). Ragged edges: x rows past M of a last partial tile are read from a zero-padded
copy, and a tile of y that overhangs it is computed into a scratch tile and copied back.

`source` is one module per compiled part of a configuration (dtype, mr, nr); mb, kc, the layout and the epilogue
are run-time arguments. The module relies on what the CPU runtime puts in front of it (backends/cpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.ops.gemm.families import numba as gemm_numba
from tracea_cli.ops.launch import CallStep, LaunchPlan
from tracea_cli.ops.lowrank_mlp.families.numba_space import (
    DTYPES,
    STORED_VECTOR,
    hand_picked,
    lowrank_space,
)
from tracea_cli.ops.lowrank_mlp.problem import ACTS, LowrankMlpProblem, check_operands
from tracea_cli.ops.numba_family import (
    SILU_SPAN,
    VECTOR_BYTES,
    NumbaFamily,
    lanes,
    vector_of,
)
from tracea_cli.space import Value

GENERATOR_VERSION = 1  # bump when the module text changes in a way the templates below do not show
ENTRY = "lowrank_mlp"
PARAMS = ("x", "U", "V", "bias", "residual", "y", "mb", "kc", "nt", "has_bias", "act", "has_residual")
NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64}
_NUMBA_TYPES = {"fp32": "float32", "fp64": "float64"}


@dataclass(frozen=True)
class KernelSpec:
    """The compile-time part of a configuration: one numba compilation per distinct spec."""

    dtype: str
    mr: int
    nr: int
    vector: int = VECTOR_BYTES  # bytes per vector register

    @classmethod
    def of(cls, problem: LowrankMlpProblem, config: Mapping[str, Value]) -> "KernelSpec":
        return cls(problem.dtype, int(config["mr"]), int(config["nr"]), vector_of(config, STORED_VECTOR))

    @property
    def lanes(self) -> int:
        return lanes(self.dtype, self.vector)

    @property
    def name(self) -> str:
        wide = "" if self.vector == VECTOR_BYTES else f"_v{self.vector}"
        return f"lowrank_mlp_{self.dtype}_{self.mr}x{self.nr}{wide}"


# ---- the epilogue over a block of y: act codes are the index in problem.ACTS ---------------------------------------

_EPILOGUE = '''
@njit(fastmath=FASTMATH, cache=CACHE)
def apply_epilogue(y, ldy, i0, rows, j0, cols, bias, has_bias, act, residual, has_residual):
    """y[i0:i0+rows, j0:j0+cols] = act(y + bias) + residual in place; y and residual flat with row stride ldy.
    NaN stays NaN through every activation (a kernel fault must show). SiLU runs over the row's span (vectors)."""
    for i in range(i0, i0 + rows):
        row = i * ldy
        if act == ACT_SILU:
            if has_bias:
                for j in range(j0, j0 + cols):
                    y[row + j] = y[row + j] + bias[j]
            silu_span(y, row + j0, row + j0 + cols)
            if has_residual:
                for j in range(j0, j0 + cols):
                    y[row + j] = y[row + j] + residual[row + j]
            continue
        for j in range(j0, j0 + cols):
            v = y[row + j]
            if has_bias:
                v = v + bias[j]
            if act == ACT_RELU:
                v = v if not v < 0 else v * 0
            elif act == ACT_GELU:
                v = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))
            if has_residual:
                v = v + residual[row + j]
            y[row + j] = v
'''

# ---- the driver -----------------------------------------------------------------------------------------------------
# lowrank_mlp(x, u, v, bias, residual, y, mb, kc, nt, has_bias, act, has_residual): arrays C-contiguous; u and v as
# the layout stores them (nt: rank × d_in and d_out × rank); bias and residual empty where the problem has none.

_DRIVER = '''
@njit(parallel=PARALLEL, fastmath=FASTMATH, cache=CACHE)
def lowrank_mlp(x2, u2, v2, bias, residual2, y2, mb, kc, nt, has_bias, act, has_residual):
    m, d_in = x2.shape
    d_out = y2.shape[1]
    rank = u2.shape[0] if nt else u2.shape[1]
    x, u, v, y, residual = x2.reshape(-1), u2.reshape(-1), v2.reshape(-1), y2.reshape(-1), residual2.reshape(-1)
    r_strips = (rank + NR - 1) // NR
    r_pad = r_strips * NR  # T's row stride: its columns past rank are zeros (U's packed strips are zero there)
    o_strips = (d_out + NR - 1) // NR
    up = np.empty(r_strips * NR * d_in, dtype=x.dtype)  # U, NR-wide strips of its rank columns, d_in-major
    vp = np.empty(o_strips * NR * rank, dtype=x.dtype)  # V, NR-wide strips of its d_out columns, rank-major
    for s in prange(r_strips + o_strips):
        if s < r_strips:
            pack_b_strip(u, u2.shape[1], nt, 0, d_in, s * NR, rank, up, s * NR * d_in)
        else:
            o = s - r_strips
            pack_b_strip(v, v2.shape[1], nt, 0, rank, o * NR, d_out, vp, o * NR * rank)
    mb = (mb + MR - 1) // MR * MR  # blocks hold whole register tiles
    for ib in prange((m + mb - 1) // mb):
        i0 = ib * mb
        rows = min(mb, m - i0)
        row_tiles = (rows + MR - 1) // MR
        # per block, not rows of one array per thread: neighbouring threads' rows would share cache lines
        t = np.empty(row_tiles * MR * r_pad, dtype=x.dtype)  # this block's T
        xs = np.zeros(MR * min(kc, d_in), dtype=x.dtype)  # a last partial tile's rows of x, zero past M
        tile = np.empty(MR * NR, dtype=x.dtype)  # a tile of y that overhangs it
        # phase 1: T = x[i0:i0+rows] . U, kc-deep passes over d_in
        for pc in range(0, d_in, kc):
            kcb = min(kc, d_in - pc)
            for sa in range(row_tiles):
                ii = i0 + sa * MR
                part = min(MR, m - ii)
                if part == MR:
                    src, a_off, a_rs = x, ii * d_in + pc, d_in
                else:
                    for r in range(part):
                        for p in range(kcb):
                            xs[r * kcb + p] = x[(ii + r) * d_in + pc + p]
                    for r in range(part * kcb, MR * kcb):
                        xs[r] = 0
                    src, a_off, a_rs = xs, 0, kcb
                for s in range(r_strips):
                    micro(kcb, src, a_off, a_rs, 1, up, s * NR * d_in + pc * NR, t, sa * MR * r_pad + s * NR, r_pad,
                          pc > 0)
        # phase 2: y = T . V strip by strip, then the epilogue over the block's rows (in L2: whole rows, so that
        # SiLU runs on long spans of vectors)
        for o in range(o_strips):
            j0 = o * NR
            cols = min(NR, d_out - j0)
            for sa in range(row_tiles):
                ii = i0 + sa * MR
                part = min(MR, m - ii)
                if part == MR and cols == NR:
                    micro(rank, t, sa * MR * r_pad, r_pad, 1, vp, o * NR * rank, y, ii * d_out + j0, d_out, False)
                else:
                    micro(rank, t, sa * MR * r_pad, r_pad, 1, vp, o * NR * rank, tile, 0, NR, False)
                    for r in range(part):
                        for j in range(cols):
                            y[(ii + r) * d_out + j0 + j] = tile[r * NR + j]
        apply_epilogue(y, d_out, i0, rows, 0, d_out, bias, has_bias, act, residual, has_residual)
'''


def module_source(spec: KernelSpec) -> str:
    """The whole module of one spec: constants, the GEMM family's micro-kernel and strip packing, epilogue, driver."""
    codes = "\n".join(f"ACT_{name.upper()} = {i}" for i, name in enumerate(ACTS))
    return "\n".join([
        f'"""Tracea CPU lowrank-mlp {spec.name} (generator {GENERATOR_VERSION}): generated by '
        'ops/lowrank_mlp/families/numba.py."""',
        "import math",
        "",
        f"MR = {spec.mr}",
        f"NR = {spec.nr}",
        f"LANES = {spec.lanes}  # elements per vector",
        'FASTMATH = {"contract"}  # FMAs are explicit (llvm.fma) in the micro-kernel; elsewhere no reassociation',
        'PARALLEL = {"fusion": False}  # packing and computing are two parallel loops in a row: never fuse them',
        codes,
        "",
        "",
        "@njit(fastmath=FASTMATH, cache=CACHE)",
    ]) + "\n" + gemm_numba.micro_kernel_source(spec.mr, spec.nr, spec.lanes) + gemm_numba.PACK_STRIP \
        + SILU_SPAN + _EPILOGUE + _DRIVER


def signature(dtype: str) -> str:
    """The driver's numba signature: x, U, V, residual, y as C-contiguous matrices, bias a vector, then the ints."""
    t = _NUMBA_TYPES[dtype]
    matrix, vector = f"{t}[:, ::1]", f"{t}[::1]"
    return (f"void({matrix}, {matrix}, {matrix}, {vector}, {matrix}, {matrix}, intp, intp, boolean, boolean, intp, "
            "boolean)")


def numba_launch(problem: LowrankMlpProblem, config: Mapping[str, Value]) -> LaunchPlan:
    values = {"mb": int(config["mb"]), "kc": int(config["kc"]), "nt": problem.layout == "nt",
              "has_bias": problem.bias, "act": ACTS.index(problem.act), "has_residual": problem.residual}
    return LaunchPlan(steps=(CallStep(ENTRY, signature(problem.dtype), PARAMS, values, int(config["threads"])),),
                      family="numba")


def numba_args(problem: LowrankMlpProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The host arrays the driver takes (a missing bias or residual as an empty array of the dtype)."""
    check_operands(problem, operands)
    dt = NUMPY_DTYPES[problem.dtype]
    return {"x": operands["x"], "U": operands["U"], "V": operands["V"], "y": operands["y"],
            "bias": operands["bias"] if problem.bias else np.empty(0, dt),
            "residual": operands["residual"] if problem.residual else np.empty((0, 0), dt)}


NUMBA = NumbaFamily(DTYPES, lowrank_space, lambda problem, config: module_source(KernelSpec.of(problem, config)),
                    numba_launch, numba_args, hand_picked, Path(__file__),
                    shared_templates=(Path(gemm_numba.__file__),))
