"""CPU GEMM kernels in numba: a packed, cache-blocked GEMM around a register-tile micro-kernel.

The algorithm is the classic layered one (Goto's). For C = epilogue(A·B) with A M×K and B K×N (nn) or N×K (nt):

    for each shared panel          (loop over N blocks of nc, or over M blocks of mc)
      for each K block of kc       (pc)
        pack the shared operand    (B: kc×nc as NR-wide strips; or A: mc×kc as MR-tall strips), in parallel
        prange over the other operand's blocks, one block per thread:
          pack the private operand (zero-padded strips)
          for each NR strip of B, for each MR strip of A:
            micro-kernel: an MR×NR tile of C += A strip · B strip, over kc

`parallel="m"` shares a packed B panel and gives each thread its own M blocks; `parallel="n"` shares a packed A
block and gives each thread its own N blocks (better when M is small). The first K block writes C, later ones add
to it, and the epilogue (bias, activation, residual) is applied to each tile after the last K block, while the tile
is still in cache. Ragged edges: packed strips are zero-padded to the full tile, and a tile that overhangs C is
computed into a scratch tile and copied back element by element. With `pack_a=False` A is read in place and only a
ragged last strip is packed.

SIMD: numba has no vector type and runs LLVM without the SLP vectoriser, so a loop-free MR×NR accumulator of
scalars stays scalar, and the loop vectoriser (which runs after small loops are fully unrolled) does not help
either. A small vocabulary of intrinsics below (`_vload`, `_vsplat`, `_vfma`, `_vstore`) gives the micro-kernel
explicit vectors of one 512-bit register each (16 fp32 or 8 fp64 lanes): LLVM keeps the MR×(NR/lanes) accumulators
in vector registers and emits packed FMAs (vfmadd231ps/pd on zmm where AVX-512 is present, split into ymm/xmm
halves elsewhere). The micro-kernel is generated Python text per tile shape (MR, NR are compile-time constants).

A `KernelSpec` (dtype, tile, parallel dimension) is one numba compilation, done once per process; block sizes,
packing of A, threads, layout and epilogue are run-time arguments (`RunOptions`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

VECTOR_BYTES = 64  # one AVX-512 register; LLVM splits it on narrower machines (ops/gemm/cpu_space.py agrees)
_NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64}
# FMAs are explicit (llvm.fma) in the micro-kernel; elsewhere only contraction is allowed, no reassociation.
_FASTMATH = {"contract"}
# Packing B and computing with it are two parallel loops in a row: they must never be fused into one.
_PARALLEL = {"fusion": False}
SHARED_PACK_BYTES = 32 << 20  # default bound on the operand packed for all threads (RunOptions.shared_pack_bytes)


# --- SIMD vocabulary -------------------------------------------------------------------------------------------


class _Vec(types.Type):
    """A SIMD vector of `lanes` elements of `dtype`, held in registers (LLVM `<lanes x dtype>`)."""

    def __init__(self, dtype: types.Type, lanes: int) -> None:
        self.dtype = dtype
        self.lanes = lanes
        super().__init__(name=f"Vec({dtype} x {lanes})")


@register_model(_Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type: _Vec) -> None:
        element = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.lanes))


def _element_pointer(context, builder, array_type, array, index):
    """Address of element `index` of a contiguous 1-D array. No wraparound, no bounds check: callers keep `index`
    valid (the kernels below do by construction, and the tests cover the edges)."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def _vload(typingctx, array, index, lanes):
    """`lanes` contiguous elements of a 1-D array starting at `index`, as a vector (unaligned load)."""
    if not isinstance(lanes, types.IntegerLiteral):
        return None
    vec = _Vec(array.dtype, lanes.literal_value)

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        vptr = builder.bitcast(ptr, ir.PointerType(context.get_value_type(vec)))
        return builder.load(vptr, align=array.dtype.bitwidth // 8)

    return vec(array, index, lanes), codegen


@intrinsic
def _vsplat(typingctx, array, index, lanes):
    """Element `index` of a 1-D array broadcast to all `lanes` lanes."""
    if not isinstance(lanes, types.IntegerLiteral):
        return None
    vec = _Vec(array.dtype, lanes.literal_value)

    def codegen(context, builder, sig, args):
        value = builder.load(_element_pointer(context, builder, sig.args[0], args[0], args[1]))
        vtype = context.get_value_type(vec)
        one = builder.insert_element(ir.Constant(vtype, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), vec.lanes), [0] * vec.lanes)
        return builder.shuffle_vector(one, ir.Constant(vtype, ir.Undefined), mask)

    return vec(array, index, lanes), codegen


@intrinsic
def _vzero(typingctx, like, lanes):
    """A vector of zeros with the element type of the array `like`."""
    if not isinstance(lanes, types.IntegerLiteral):
        return None
    vec = _Vec(like.dtype, lanes.literal_value)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(vec), None)

    return vec(like, lanes), codegen


@intrinsic
def _vfma(typingctx, a, b, c):
    """a·b + c lane by lane, rounded once (llvm.fma)."""
    if not (isinstance(a, _Vec) and a == b == c):
        return None

    def codegen(context, builder, sig, args):
        vtype = context.get_value_type(a)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vtype, [vtype] * 3), f"llvm.fma.v{a.lanes}f{a.dtype.bitwidth}"
        )
        return builder.call(fn, args)

    return a(a, b, c), codegen


@intrinsic
def _vadd(typingctx, a, b):
    if not (isinstance(a, _Vec) and a == b):
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return a(a, b), codegen


@intrinsic
def _vstore(typingctx, array, index, vec):
    """Store a vector into `lanes` contiguous elements of a 1-D array starting at `index`."""
    if not (isinstance(vec, _Vec) and vec.dtype == array.dtype):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        vptr = builder.bitcast(ptr, ir.PointerType(context.get_value_type(vec)))
        builder.store(args[2], vptr, align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.void(array, index, vec), codegen


# --- what is compiled, and what is chosen at run time ----------------------------------------------------------


@dataclass(frozen=True)
class KernelSpec:
    """The compile-time part of a configuration: one numba compilation per distinct spec.

    `mr` rows × `nr` columns is the register tile (`nr` a multiple of the lanes of one vector); `parallel` is the
    dimension whose blocks the threads share out: "m" (a packed B panel shared, M blocks per thread) or "n" (a
    packed A block shared, N blocks per thread). Layout and epilogue are run-time choices (`RunOptions`): they act
    once per packed strip and once per finished tile, never inside the micro-kernel.
    """

    dtype: str  # fp32 | fp64
    mr: int
    nr: int
    parallel: str  # m | n

    def __post_init__(self) -> None:
        if self.dtype not in _NUMPY_DTYPES:
            raise ValueError(f"the CPU kernels do fp32 and fp64, not {self.dtype}")
        if self.mr < 1 or self.nr < 1 or self.nr % self.lanes:
            raise ValueError(f"need mr >= 1 and nr a positive multiple of {self.lanes} for {self.dtype}")
        if self.parallel not in ("m", "n"):
            raise ValueError(f"parallel must be 'm' or 'n', not {self.parallel!r}")

    @property
    def lanes(self) -> int:
        return lanes_for(self.dtype)

    @property
    def name(self) -> str:
        return f"gemm_{self.dtype}_{self.mr}x{self.nr}_parallel_{self.parallel}"


@dataclass(frozen=True)
class RunOptions:
    """The run-time part of a configuration, and the problem's layout and epilogue. Block sizes are in elements:
    rows of A per block (`mc`), the K extent of a block (`kc`), columns of B per block (`nc`). `pack_a=False` reads
    A in place (only a ragged last strip is packed). `layout` is "nn" (B is K×N) or "nt" (B is N×K); `epilogue` a
    name from ops.gemm.problem.EPILOGUES. `shared_pack_bytes` bounds the operand packed for all threads: as many K
    blocks of it as fit are packed at once (at least one)."""

    mc: int
    kc: int
    nc: int
    pack_a: bool = True
    threads: int = 1
    layout: str = "nn"
    epilogue: str = "none"
    shared_pack_bytes: int = SHARED_PACK_BYTES

    def __post_init__(self) -> None:
        if min(self.mc, self.kc, self.nc, self.threads, self.shared_pack_bytes) < 1:
            raise ValueError("block sizes and threads must be positive")
        if self.layout not in ("nn", "nt"):
            raise ValueError(f"unknown layout {self.layout!r}")
        if self.epilogue not in EPILOGUE_CODES:
            raise ValueError(f"unknown epilogue {self.epilogue!r}")


def lanes_for(dtype: str) -> int:
    """Elements of `dtype` in one vector register of VECTOR_BYTES."""
    return VECTOR_BYTES // np.dtype(_NUMPY_DTYPES[dtype]).itemsize


# --- the micro-kernel, generated per tile shape ----------------------------------------------------------------


def micro_kernel_source(mr: int, nr: int, lanes: int) -> str:
    """Python source of the MR×NR micro-kernel, unrolled over the tile; its contract is in the generated docstring."""
    nv = nr // lanes
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(mr)]
    out = [
        "def micro(kc, a, a_off, a_rs, a_ps, b, b_off, d, d_off, ldd, accumulate):",
        f'    """d[{mr}×{nr} tile at d_off, row stride ldd] (+)= A strip · B strip over kc steps.',
        "",
        f"    A element (r, p) is a[a_off + r*a_rs + p*a_ps]; B element (p, j) is b[b_off + p*{nr} + j] (packed).",
        '    With `accumulate` the tile is added to d; otherwise d is overwritten, never read (it may hold NaN)."""',
    ]
    for row in acc:
        out.append("    " + " = ".join(row) + f" = _vzero(b, {lanes})")
    for r in range(mr):
        out.append(f"    a{r} = a_off + {r} * a_rs")
    out.append("    for p in range(kc):")
    out.append("        ap = p * a_ps")
    out.append(f"        bp = b_off + p * {nr}")
    for v in range(nv):
        out.append(f"        b{v} = _vload(b, bp + {v * lanes}, {lanes})")
    for r in range(mr):
        out.append(f"        s = _vsplat(a, a{r} + ap, {lanes})")
        for v in range(nv):
            out.append(f"        {acc[r][v]} = _vfma(s, b{v}, {acc[r][v]})")
    out.append("    if accumulate:")
    for r in range(mr):
        for v in range(nv):
            at = f"d_off + {r} * ldd + {v * lanes}"
            out.append(f"        _vstore(d, {at}, _vadd(_vload(d, {at}, {lanes}), {acc[r][v]}))")
    out.append("    else:")
    for r in range(mr):
        for v in range(nv):
            out.append(f"        _vstore(d, d_off + {r} * ldd + {v * lanes}, {acc[r][v]})")
    return "\n".join(out) + "\n"


# --- the epilogue, chosen at run time per tile -----------------------------------------------------------------

EPILOGUE_CODES = {"none": 0, "bias": 1, "bias_relu": 2, "bias_silu": 3, "bias_gelu": 4, "bias_residual": 5}
_BIAS, _BIAS_RELU, _BIAS_SILU, _BIAS_GELU, _BIAS_RESIDUAL = 1, 2, 3, 4, 5


@njit(fastmath=_FASTMATH)
def _apply_epilogue(kind, c, ldc, i0, rows, j0, cols, bias, residual):
    """C[i0:i0+rows, j0:j0+cols] = act(C + bias) (+ residual) in place; c and residual flat with row stride ldc.

    One branch per tile row, none per element. NaN stays NaN through every activation (a kernel fault must show)."""
    for i in range(i0, i0 + rows):
        row = i * ldc
        if kind == _BIAS or kind == _BIAS_RESIDUAL:
            for j in range(j0, j0 + cols):
                c[row + j] = c[row + j] + bias[j]
        elif kind == _BIAS_RELU:
            for j in range(j0, j0 + cols):
                x = c[row + j] + bias[j]
                c[row + j] = x if not x < 0 else x * 0
        elif kind == _BIAS_SILU:
            for j in range(j0, j0 + cols):
                x = c[row + j] + bias[j]
                c[row + j] = x / (1.0 + math.exp(-x))
        elif kind == _BIAS_GELU:
            for j in range(j0, j0 + cols):
                x = c[row + j] + bias[j]
                c[row + j] = 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))
        if kind == _BIAS_RESIDUAL:
            for j in range(j0, j0 + cols):
                c[row + j] = c[row + j] + residual[row + j]


# --- packing, the tiles of one block, and the drivers: module text specialised per spec ----------------------
# MR and NR are globals of the generated module, so numba folds them as compile-time constants, as before.

_ROUTINES_SOURCE = '''
@njit(fastmath=_FASTMATH, cache=_CACHE)
def pack_a_strips(a, lda, i_start, i_end, pc, kcb, first_strip, last_strip, dst):
    """A[i, pc:pc+kcb] for strips first_strip..last_strip-1 (MR rows each from i_start, clipped at i_end) into
    dst: strip s at s*MR*kcb, element (r, p) at p*MR + r; rows past i_end are zero."""
    for s in range(first_strip, last_strip):
        base = s * MR * kcb
        for r in range(MR):
            i = i_start + s * MR + r
            if i < i_end:
                row = i * lda + pc
                for p in range(kcb):
                    dst[base + p * MR + r] = a[row + p]
            else:
                for p in range(kcb):
                    dst[base + p * MR + r] = 0

@njit(fastmath=_FASTMATH, cache=_CACHE)
def pack_b_strip(b, ldb, nt, pc, kcb, j0, n, dst, base):
    """B[pc:pc+kcb, j0:j0+NR] (columns past n zero) into dst at base, element (p, j) at p*NR + j."""
    cols = min(NR, n - j0)
    if not nt:
        for p in range(kcb):
            row = (pc + p) * ldb + j0
            for j in range(cols):
                dst[base + p * NR + j] = b[row + j]
            for j in range(cols, NR):
                dst[base + p * NR + j] = 0
    else:  # nt: B is stored N×K, so row j of storage is column j of the operand
        for j in range(cols):
            row = (j0 + j) * ldb + pc
            for p in range(kcb):
                dst[base + p * NR + j] = b[row + p]
        for j in range(cols, NR):
            for p in range(kcb):
                dst[base + p * NR + j] = 0

@njit(fastmath=_FASTMATH, cache=_CACHE)
def tiles(a, lda, apack, pack_a, ic, mcb, pc, kcb, bpack, jc, ncb, c, ldc, first, epilogue, bias, residual,
          scratch):
    """Every MR×NR tile of C[ic:ic+mcb, jc:jc+ncb] for one K block. `apack` holds the block's packed A strips
    (all of them, or only a ragged last one when A is read in place), `bpack` its packed B strips. The epilogue
    code is applied after the tile is stored (callers pass 0 except on the last K block)."""
    for sb in range((ncb + NR - 1) // NR):
        j0 = jc + sb * NR
        cols = min(NR, jc + ncb - j0)
        b_off = sb * NR * kcb
        for sa in range((mcb + MR - 1) // MR):
            i0 = ic + sa * MR
            rows = min(MR, ic + mcb - i0)
            if pack_a or rows < MR:
                src, a_off, a_rs, a_ps = apack, sa * MR * kcb, 1, MR
            else:
                src, a_off, a_rs, a_ps = a, i0 * lda + pc, lda, 1
            whole = rows == MR and cols == NR
            if whole:
                dst, d_off, ldd, accumulate = c, i0 * ldc + j0, ldc, not first
            else:  # the tile overhangs C: compute it into scratch, copy back what fits
                dst, d_off, ldd, accumulate = scratch, 0, NR, False
            micro(kcb, src, a_off, a_rs, a_ps, bpack, b_off, dst, d_off, ldd, accumulate)
            if not whole:
                for r in range(rows):
                    for j in range(cols):
                        if first:
                            c[(i0 + r) * ldc + j0 + j] = scratch[r * NR + j]
                        else:
                            c[(i0 + r) * ldc + j0 + j] += scratch[r * NR + j]
            if epilogue:
                _apply_epilogue(epilogue, c, ldc, i0, rows, j0, cols, bias, residual)
'''

# The whole GEMM for one spec: gemm(a, b, c, bias, residual, mc, kc, nc, pack_a, nt, epilogue, budget), arrays
# C-contiguous (b is N×K when nt); `threads` is numba.get_num_threads() (the rows of the per-thread scratch,
# indexed by numba.get_thread_id(); read by the caller, since in compiled code it is a ctypes pointer that stops
# numba caching the function). The shared operand is packed for several K blocks at once (as many as fit in
# `budget` elements), so that the threads meet at a barrier twice per group of K blocks rather than twice per K
# block: on a busy machine every barrier waits for the most delayed thread.
_DRIVERS_SOURCE = '''
@njit(parallel=_PARALLEL, fastmath=_FASTMATH, cache=_CACHE)
def gemm_parallel_m(a2, b2, c2, bias, residual2, mc, kc, nc, pack_a, nt, epilogue, budget, threads):
    m, k = a2.shape
    n = c2.shape[1]
    a, b, c, residual = a2.reshape(-1), b2.reshape(-1), c2.reshape(-1), residual2.reshape(-1)
    ldb = b2.shape[1]
    mc = (mc + MR - 1) // MR * MR
    depth = min(kc, k)
    panel = (min(nc, n) + NR - 1) // NR * NR * depth  # one K block of the packed B panel
    k_blocks = (k + kc - 1) // kc
    group = max(1, min(k_blocks, budget // panel))  # K blocks packed at once
    bpack = np.empty(group * panel, dtype=a.dtype)  # shared by all threads
    # one packed A block and one scratch tile per thread (row get_thread_id())
    apack = np.empty((threads, min(mc, (m + MR - 1) // MR * MR) * depth), dtype=a.dtype)
    scratch = np.empty((threads, MR * NR), dtype=a.dtype)
    m_blocks = (m + mc - 1) // mc
    for jc in range(0, n, nc):
        ncb = min(nc, n - jc)
        b_strips = (ncb + NR - 1) // NR
        for kb0 in range(0, k_blocks, group):
            kbs = min(group, k_blocks - kb0)
            for t in prange(kbs * b_strips):
                g, sb = t // b_strips, t % b_strips
                pc = (kb0 + g) * kc
                kcb = min(kc, k - pc)
                pack_b_strip(b, ldb, nt, pc, kcb, jc + sb * NR, n, bpack, g * panel + sb * NR * kcb)
            for ib in prange(m_blocks):
                mine = numba.get_thread_id()
                ic = ib * mc
                mcb = min(mc, m - ic)
                strips = (mcb + MR - 1) // MR
                first = 0 if pack_a else strips - (1 if mcb % MR else 0)
                for g in range(kbs):
                    pc = (kb0 + g) * kc
                    kcb = min(kc, k - pc)
                    pack_a_strips(a, k, ic, ic + mcb, pc, kcb, first, strips, apack[mine])
                    tiles(a, k, apack[mine], pack_a, ic, mcb, pc, kcb, bpack[g * panel:(g + 1) * panel], jc,
                          ncb, c, n, pc == 0, epilogue if pc + kcb == k else 0, bias, residual, scratch[mine])

@njit(parallel=_PARALLEL, fastmath=_FASTMATH, cache=_CACHE)
def gemm_parallel_n(a2, b2, c2, bias, residual2, mc, kc, nc, pack_a, nt, epilogue, budget, threads):
    m, k = a2.shape
    n = c2.shape[1]
    a, b, c, residual = a2.reshape(-1), b2.reshape(-1), c2.reshape(-1), residual2.reshape(-1)
    ldb = b2.shape[1]
    nc = (nc + NR - 1) // NR * NR
    depth = min(kc, k)
    panel = (min(mc, m) + MR - 1) // MR * MR * depth  # one K block of the packed A block
    k_blocks = (k + kc - 1) // kc
    group = max(1, min(k_blocks, budget // panel))  # K blocks packed at once
    apack = np.empty(group * panel, dtype=a.dtype)  # shared by all threads
    # one packed B block and one scratch tile per thread (row get_thread_id())
    bpack = np.empty((threads, min(nc, (n + NR - 1) // NR * NR) * depth), dtype=a.dtype)
    scratch = np.empty((threads, MR * NR), dtype=a.dtype)
    n_blocks = (n + nc - 1) // nc
    for ic in range(0, m, mc):
        mcb = min(mc, m - ic)
        strips = (mcb + MR - 1) // MR
        first = 0 if pack_a else strips - (1 if mcb % MR else 0)
        for kb0 in range(0, k_blocks, group):
            kbs = min(group, k_blocks - kb0)
            for t in prange(kbs * (strips - first)):
                g, s = t // (strips - first), first + t % (strips - first)
                pc = (kb0 + g) * kc
                kcb = min(kc, k - pc)
                pack_a_strips(a, k, ic, ic + mcb, pc, kcb, s, s + 1, apack[g * panel:(g + 1) * panel])
            for jb in prange(n_blocks):
                mine = numba.get_thread_id()
                jc = jb * nc
                ncb = min(nc, n - jc)
                for g in range(kbs):
                    pc = (kb0 + g) * kc
                    kcb = min(kc, k - pc)
                    for sb in range((ncb + NR - 1) // NR):
                        pack_b_strip(b, ldb, nt, pc, kcb, jc + sb * NR, n, bpack[mine], sb * NR * kcb)
                    tiles(a, k, apack[g * panel:(g + 1) * panel], pack_a, ic, mcb, pc, kcb, bpack[mine], jc, ncb,
                          c, n, pc == 0, epilogue if pc + kcb == k else 0, bias, residual, scratch[mine])
'''



def _signature(spec: KernelSpec):
    element = numba.from_dtype(np.dtype(_NUMPY_DTYPES[spec.dtype]))
    matrix, vector = types.Array(element, 2, "C"), types.Array(element, 1, "C")
    return types.void(matrix, matrix, matrix, vector, matrix, types.intp, types.intp, types.intp, types.boolean,
                      types.boolean, types.intp, types.intp, types.intp)


# --- compiled kernels, cached per process ----------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledGemm:
    """The compiled kernel of one spec. Calling it computes C = epilogue(A·B) in place."""

    spec: KernelSpec
    dispatcher: Callable
    micro: Callable  # the micro-kernel's own dispatcher (inlined into `dispatcher`; kept for inspection)
    compile_s: float  # seconds this process took to get it (compiling, or loading numba's on-disk cache)
    module_path: str | None = None  # the generated module under the kernel cache folder; None: compiled in memory

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, options: RunOptions, *,
                 bias: np.ndarray | None = None, residual: np.ndarray | None = None) -> None:
        """a: M×K; b: K×N (nn) or N×K (nt); c: M×N, overwritten; bias: N values; residual: M×N. All C-contiguous,
        of the spec's dtype (numba refuses anything else). `options.threads` must not exceed numba's thread pool
        (`numba.config.NUMBA_NUM_THREADS`)."""
        has_bias, has_residual = options.epilogue != "none", options.epilogue == "bias_residual"
        if (bias is None) == has_bias or (residual is None) == has_residual:
            raise ValueError(f"epilogue {options.epilogue!r} needs bias={has_bias}, residual={has_residual}")
        numba.set_num_threads(options.threads)
        self.dispatcher(a, b, c, np.empty(0, a.dtype) if bias is None else bias,
                        np.empty((0, 0), a.dtype) if residual is None else residual,
                        options.mc, options.kc, options.nc, options.pack_a, options.layout == "nt",
                        EPILOGUE_CODES[options.epilogue], options.shared_pack_bytes // a.itemsize,
                        numba.get_num_threads())

    def assembly(self) -> str:
        """The host assembly of the compiled kernel (numba's inspect_asm), inlined routines included."""
        return "\n".join(self.dispatcher.inspect_asm().values())

    def micro_assembly(self) -> str:
        """The host assembly of the micro-kernel compiled on its own."""
        return "\n".join(self.micro.inspect_asm().values())


# Keyed by spec and where it came from: a kernel loaded from the disk cache has no assembly to inspect, so an
# in-memory request never gets it.
_compiled: dict[tuple[KernelSpec, bool], CompiledGemm] = {}
_lock = threading.Lock()


def module_source(spec: KernelSpec, *, cache: bool) -> str:
    """Python text of one module holding every function of `spec`'s kernel at module level (micro-kernel, packing,
    tiles, both drivers), importing the shared intrinsics and the epilogue from this module. With `cache` the
    functions are decorated cache=True: numba then keeps their machine code next to the module file."""
    names = "_FASTMATH, _PARALLEL, _apply_epilogue, _vadd, _vfma, _vload, _vsplat, _vstore, _vzero"
    header = "\n".join([
        f'"""Generated by tracea_cli.backends.cpu_gemm_kernels for {spec} (do not edit)."""',
        "import numba",
        "import numpy as np",
        "from numba import njit, prange",
        f"from tracea_cli.backends.cpu_gemm_kernels import {names}",
        "",
        f"MR = {spec.mr}",
        f"NR = {spec.nr}",
        f"_CACHE = {bool(cache)}",
        "",
        "",
        "@njit(fastmath=_FASTMATH, cache=_CACHE)",
    ])
    return header + "\n" + micro_kernel_source(spec.mr, spec.nr, spec.lanes) + _ROUTINES_SOURCE + _DRIVERS_SOURCE


def module_path(spec: KernelSpec, cache_dir: Path) -> Path:
    """Where `spec`'s generated module lives under `cache_dir`: the name carries a hash of this generator's source,
    the spec and numba's version, so that a changed generator or numba never loads stale machine code."""
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes())
    digest.update(repr(spec).encode())
    digest.update(numba.__version__.encode())
    return Path(cache_dir) / f"{spec.name}_{digest.hexdigest()[:16]}.py"


def _load_cached_module(spec: KernelSpec, cache_dir: Path) -> tuple[ModuleType, Path] | None:
    """Write (once) and import `spec`'s module under `cache_dir`; None when the folder cannot be written."""
    path = module_path(spec, cache_dir)
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(module_source(spec, cache=True))
            os.replace(tmp, path)  # atomic: concurrent workers never import half a file
        if not os.access(path.parent, os.W_OK):  # numba could not store its cache beside it
            return None
    except OSError:
        return None
    name = f"_tracea_cpu_gemm_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # numba finds a cached function's module by name when it loads the cache
    module_spec.loader.exec_module(module)
    return module, path


def _memory_module(spec: KernelSpec) -> dict:
    namespace: dict = {"__name__": f"_tracea_cpu_gemm_{spec.name}"}
    exec(compile(module_source(spec, cache=False), f"<{spec.name}>", "exec"), namespace)
    return namespace


def compiled_gemm(spec: KernelSpec, cache_dir: Path | str | None = None) -> CompiledGemm:
    """The kernel for `spec`, compiled on first use and reused for the rest of the process.

    With `cache_dir` the kernel's module is generated into that folder and numba caches its machine code there, so
    that a later process loads it in a fraction of a second instead of compiling for seconds; without it, or when
    the folder cannot be written, the kernel is compiled in memory (the assembly can then be inspected)."""
    with _lock:
        kernel = _compiled.get((spec, cache_dir is not None))
        if kernel is None:
            t0 = time.perf_counter()
            loaded = _load_cached_module(spec, Path(cache_dir)) if cache_dir is not None else None
            if loaded is not None:
                namespace, path = vars(loaded[0]), loaded[1]
            else:
                namespace, path = _memory_module(spec), None
            dispatcher = namespace[f"gemm_parallel_{spec.parallel}"]
            dispatcher.compile(_signature(spec))
            dispatcher.disable_compile()  # other argument types fail loudly instead of compiling a slow variant
            kernel = CompiledGemm(spec, dispatcher, namespace["micro"], time.perf_counter() - t0,
                                  None if path is None else str(path))
            _compiled[(spec, cache_dir is not None)] = kernel
        return kernel


def cached_specs() -> tuple[KernelSpec, ...]:
    """The specs compiled so far in this process."""
    with _lock:
        return tuple(dict.fromkeys(spec for spec, _ in _compiled))
