"""The CPU GEMM family: a packed, cache-blocked GEMM around a register-tile micro-kernel, as numba source.

The algorithm is the classic layered one (Goto's). For C = epilogue(A·B) with A M×K and B K×N (nn) or N×K (nt):

    for each block of the shared operand     (N blocks of nc, or M blocks of mc)
      for each group of K blocks of kc
        pack the shared operand    (B: kc×nc as NR-wide strips; or A: mc×kc as MR-tall strips), in parallel
        prange over the other operand's blocks, one block per thread:
          pack the private operand (zero-padded strips)
          for each NR strip of B, for each MR strip of A:
            micro-kernel: an MR×NR tile of C += A strip · B strip, over kc

`parallel="m"` shares a packed B panel and gives each thread its own M blocks; `parallel="n"` shares a packed A
block and gives each thread its own N blocks (better when M is small). Both drivers come from one template
(`_DRIVER`), the two operands' roles filled in from `_ROLES`. The first K block writes C, later ones add to it, and
the epilogue (bias, activation, residual) is applied to each tile after the last K block, while it is in cache.
Ragged edges: packed strips are zero-padded to the full tile, and a tile that overhangs C is computed into a
scratch tile and copied back element by element. With `pack_a=False` A is read in place and only a ragged last
strip is packed.

SIMD: numba has no vector type and runs LLVM without the SLP vectoriser, so the micro-kernel uses the CPU runtime's
vector vocabulary (backends/numba_simd.py: `vload`, `vsplat`, `vfma`, `vadd`, `vstore`, `vzero` over one register
of the target's widest vectors, `vector`: 64 bytes, 16 fp32 or 8 fp64 lanes, where AVX-512 is present, else 32):
LLVM keeps the MR×(NR/lanes) accumulators in vector registers and emits packed FMAs (vfmadd231ps/pd on zmm or ymm).
While the A strips of one B strip run, each also prefetches its share of the next B strip into L2 (`vprefetch`, one
cache line per K step), so that a fresh strip comes from L2 rather than L3.

`source` is one module per compiled part of a configuration (dtype, mr, nr, parallel): its text is what the CPU
runtime compiles, caches on disk and hashes. Block sizes, packing of A, threads, layout and epilogue are run-time
arguments (`launch`'s CallStep values), so a search compiles at most a dozen kernels per dtype. The module relies on
what the CPU runtime puts in front of it (backends/cpu.py, `PROLOGUE`): numba, numpy as np, njit, prange, the
vector vocabulary and `CACHE` (whether numba may keep the machine code on disk).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.ops.gemm.families.numba_space import (
    DTYPES,
    STORED_VECTOR,
    gemm_space,
    hand_picked,
)
from tracea_cli.ops.gemm.problem import EPILOGUES, GemmProblem
from tracea_cli.ops.launch import CallStep, LaunchPlan
from tracea_cli.ops.numba_family import (
    SILU_SPAN,
    WIDE_VECTOR_BYTES,
    NumbaFamily,
    lanes,
    vector_of,
)
from tracea_cli.space import Value

GENERATOR_VERSION = 1  # bump when the module text changes in a way the templates below do not show
ENTRY = "gemm"
CACHE_LINE_BYTES = 64
SHARED_PACK_BYTES = 32 << 20  # bound on the operand packed for all threads: as many K blocks as fit, at least one
PARAMS = ("A", "B", "C", "bias", "residual", "mc", "kc", "nc", "pack_a", "nt", "epilogue", "budget", "threads")
NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64}
_NUMBA_TYPES = {"fp32": "float32", "fp64": "float64"}


@dataclass(frozen=True)
class KernelSpec:
    """The compile-time part of a configuration: one numba compilation per distinct spec."""

    dtype: str  # fp32 | fp64
    mr: int
    nr: int
    parallel: str  # m | n
    vector: int = WIDE_VECTOR_BYTES  # bytes per vector register

    @classmethod
    def of(cls, problem: GemmProblem, config: Mapping[str, Value]) -> "KernelSpec":
        return cls(problem.dtype, int(config["mr"]), int(config["nr"]), str(config["parallel"]),
                   vector_of(config, STORED_VECTOR))

    @property
    def lanes(self) -> int:
        return lanes(self.dtype, self.vector)

    @property
    def line(self) -> int:
        """Elements of the dtype in one 64-byte cache line."""
        return CACHE_LINE_BYTES // np.dtype(NUMPY_DTYPES[self.dtype]).itemsize

    @property
    def name(self) -> str:
        narrow = "" if self.vector == WIDE_VECTOR_BYTES else "_ymm"
        return f"gemm_{self.dtype}_{self.mr}x{self.nr}_parallel_{self.parallel}{narrow}"


# ---- the micro-kernel, generated per tile shape -------------------------------------------------------------------


def micro_kernel_source(mr: int, nr: int, lanes: int, *, packed: bool = False, prefetch: int = 0) -> str:
    """Python source of the MR×NR micro-kernel, unrolled over the tile; its contract is in the generated docstring.

    `packed`: `micro_packed`, for an A strip packed as element (r, p) at a_off + p*MR + r. Its strides are
    constants, so the compiled loop reads the strip through one pointer with constant offsets, where the general
    `micro` (A in place, strides as arguments) advances one address per row.
    `prefetch`: elements per cache line (0: none). The kernel then takes `pf`, and each step also fetches the line
    of b at pf + p*prefetch into L2: the caller points it at the B strip the next tiles will read, so that the strip
    is in L2, not L3, when they start."""
    nv = nr // lanes
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(mr)]
    pf = ", pf" if prefetch else ""
    if packed:
        head = f"def micro_packed(kc, a, a_off, b, b_off, d, d_off, ldd, accumulate{pf}):"
        a_element, a_rs, a_ps = f"a[a_off + p*{mr} + r] (packed)", "1", str(mr)
    else:
        head = f"def micro(kc, a, a_off, a_rs, a_ps, b, b_off, d, d_off, ldd, accumulate{pf}):"
        a_element, a_rs, a_ps = "a[a_off + r*a_rs + p*a_ps]", "a_rs", "a_ps"
    out = [
        head,
        f'    """d[{mr}×{nr} tile at d_off, row stride ldd] (+)= A strip · B strip over kc steps.',
        "",
        f"    A element (r, p) is {a_element}; B element (p, j) is b[b_off + p*{nr} + j] (packed).",
        *([f"    Step p also prefetches b[pf + p*{prefetch}]'s cache line into L2 (a hint: any pf is safe)."]
          if prefetch else []),
        '    With `accumulate` the tile is added to d; otherwise d is overwritten, never read (it may hold NaN)."""',
    ]
    for row in acc:
        out.append("    " + " = ".join(row) + f" = vzero(b, {lanes})")
    for r in range(mr):
        out.append(f"    a{r} = a_off + {r} * {a_rs}")
    out.append("    for p in range(kc):")
    out.append(f"        ap = p * {a_ps}")
    out.append(f"        bp = b_off + p * {nr}")
    if prefetch:
        out.append(f"        vprefetch(b, pf + p * {prefetch}, 2)")
    for v in range(nv):
        out.append(f"        b{v} = vload(b, bp + {v * lanes}, {lanes})")
    for r in range(mr):
        out.append(f"        s = vsplat(a, a{r} + ap, {lanes})")
        for v in range(nv):
            out.append(f"        {acc[r][v]} = vfma(s, b{v}, {acc[r][v]})")
    out.append("    if accumulate:")
    for r in range(mr):
        for v in range(nv):
            at = f"d_off + {r} * ldd + {v * lanes}"
            out.append(f"        vstore(d, {at}, vadd(vload(d, {at}, {lanes}), {acc[r][v]}))")
    out.append("    else:")
    for r in range(mr):
        for v in range(nv):
            out.append(f"        vstore(d, d_off + {r} * ldd + {v * lanes}, {acc[r][v]})")
    return "\n".join(out) + "\n"


# ---- the epilogue, chosen at run time per tile (codes: ops/gemm/problem.EPILOGUES) --------------------------------

_EPILOGUE = '''
@njit(fastmath=FASTMATH, cache=CACHE)
def apply_epilogue(kind, c, ldc, i0, rows, j0, cols, bias, residual):
    """C[i0:i0+rows, j0:j0+cols] = act(C + bias) (+ residual) in place; c and residual flat with row stride ldc.

    One branch per tile row, none per element. NaN stays NaN through every activation (a kernel fault must show)."""
    for i in range(i0, i0 + rows):
        row = i * ldc
        if kind == E_BIAS or kind == E_BIAS_RESIDUAL:
            for j in range(j0, j0 + cols):
                c[row + j] = c[row + j] + bias[j]
        elif kind == E_BIAS_RELU:
            for j in range(j0, j0 + cols):
                x = c[row + j] + bias[j]
                c[row + j] = x if not x < 0 else x * 0
        elif kind == E_BIAS_SILU:
            for j in range(j0, j0 + cols):
                c[row + j] = c[row + j] + bias[j]
            silu_span(c, row + j0, row + j0 + cols)
        elif kind == E_BIAS_GELU:
            for j in range(j0, j0 + cols):
                x = c[row + j] + bias[j]
                c[row + j] = 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))
        if kind == E_BIAS_RESIDUAL:
            for j in range(j0, j0 + cols):
                c[row + j] = c[row + j] + residual[row + j]
'''

# ---- packing and the tiles of one block (MR and NR are module constants, which numba folds) ------------------------

_PACK_A = '''
@njit(fastmath=FASTMATH, cache=CACHE)
def pack_a_strips(a, lda, i_start, i_end, pc, kcb, first_strip, last_strip, dst):
    """A[i, pc:pc+kcb] for strips first_strip..last_strip-1 (MR rows each from i_start, clipped at i_end) into
    dst: strip s at s*MR*kcb, element (r, p) at p*MR + r; rows past i_end are zero."""
    for s in range(first_strip, last_strip):
        base = s * MR * kcb
        i0 = i_start + s * MR
        if i0 + MR <= i_end:  # a whole strip: written in order, MR rows read side by side
            for p in range(kcb):
                for r in range(MR):
                    dst[base + p * MR + r] = a[(i0 + r) * lda + pc + p]
        else:
            for r in range(MR):
                i = i0 + r
                if i < i_end:
                    row = i * lda + pc
                    for p in range(kcb):
                        dst[base + p * MR + r] = a[row + p]
                else:
                    for p in range(kcb):
                        dst[base + p * MR + r] = 0
'''

# one strip of a matrix operand packed for the micro-kernel (other ops' CPU families pack their operands with it)
PACK_STRIP = '''
@njit(fastmath=FASTMATH, cache=CACHE)
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
'''

_TILES = '''
@njit(fastmath=FASTMATH, cache=CACHE)
def pack_b_strips(b, ldb, nt, pc, kcb, j_start, n, first_strip, last_strip, dst):
    """B's strips first_strip..last_strip-1 (NR columns each from j_start) into dst: strip s at s*NR*kcb."""
    for s in range(first_strip, last_strip):
        pack_b_strip(b, ldb, nt, pc, kcb, j_start + s * NR, n, dst, s * NR * kcb)

@njit(fastmath=FASTMATH, cache=CACHE)
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
            whole = rows == MR and cols == NR
            if whole:
                dst, d_off, ldd, accumulate = c, i0 * ldc + j0, ldc, not first
            else:  # the tile overhangs C: compute it into scratch, copy back what fits
                dst, d_off, ldd, accumulate = scratch, 0, NR, False
            # while the tiles of this B strip run, each fetches its share of the next strip into L2
            pf = min(b_off + NR * kcb + sa * kcb * LINE, bpack.size - 1)
            if pack_a or rows < MR:
                micro_packed(kcb, apack, sa * MR * kcb, bpack, b_off, dst, d_off, ldd, accumulate, pf)
            else:
                micro(kcb, a, i0 * lda + pc, lda, 1, bpack, b_off, dst, d_off, ldd, accumulate, pf)
            if not whole:
                for r in range(rows):
                    for j in range(cols):
                        if first:
                            c[(i0 + r) * ldc + j0 + j] = scratch[r * NR + j]
                        else:
                            c[(i0 + r) * ldc + j0 + j] += scratch[r * NR + j]
            if epilogue:
                apply_epilogue(epilogue, c, ldc, i0, rows, j0, cols, bias, residual)
'''

# ---- the driver: one template, the shared operand (S) packed by all threads, the private one (P) by each --------
# gemm(a, b, c, bias, residual, mc, kc, nc, pack_a, nt, epilogue, budget, threads): arrays C-contiguous (b is N×K
# when nt); `threads` is numba.get_num_threads() (the rows of the per-thread buffers, indexed by
# numba.get_thread_id(); passed in, since in compiled code it is a ctypes pointer that stops numba caching the
# function). The shared operand is packed for several K blocks at once (as many as fit in `budget` elements), so
# that the threads meet at a barrier twice per group of K blocks rather than twice per K block: on a busy machine
# every barrier waits for the most delayed thread.

_ROLES = {
    "A": {"dim": "m", "blk": "mc", "tile": "MR", "pos": "ic", "ext": "mcb", "pack": "apack",
          "first": "0 if pack_a else {strips} - (1 if mcb % MR else 0)",
          "strips": "pack_a_strips(a, k, ic, ic + mcb, pc, kcb, {lo}, {hi}, {dst})"},
    "B": {"dim": "n", "blk": "nc", "tile": "NR", "pos": "jc", "ext": "ncb", "pack": "bpack", "first": "0",
          "strips": "pack_b_strips(b, ldb, nt, pc, kcb, jc, n, {lo}, {hi}, {dst})"},
}

_DRIVER = '''
@njit(parallel=PARALLEL, fastmath=FASTMATH, cache=CACHE)
def gemm(a2, b2, c2, bias, residual2, mc, kc, nc, pack_a, nt, epilogue, budget, threads):
    m, k = a2.shape
    n = c2.shape[1]
    a, b, c, residual = a2.reshape(-1), b2.reshape(-1), c2.reshape(-1), residual2.reshape(-1)
    ldb = b2.shape[1]
    {P_blk} = ({P_blk} + {P_tile} - 1) // {P_tile} * {P_tile}  # private blocks hold whole strips
    depth = min(kc, k)
    panel = (min({S_blk}, {S_dim}) + {S_tile} - 1) // {S_tile} * {S_tile} * depth  # one K block of the shared operand
    k_blocks = (k + kc - 1) // kc
    group = max(1, min(k_blocks, budget // panel))  # K blocks packed at once
    {S_pack} = np.empty(group * panel, dtype=a.dtype)  # shared by all threads
    # one packed block of the private operand and one scratch tile per thread (row get_thread_id())
    {P_pack} = np.empty((threads, min({P_blk}, ({P_dim} + {P_tile} - 1) // {P_tile} * {P_tile}) * depth), dtype=a.dtype)
    scratch = np.empty((threads, MR * NR), dtype=a.dtype)
    blocks = ({P_dim} + {P_blk} - 1) // {P_blk}
    for {S_pos} in range(0, {S_dim}, {S_blk}):
        {S_ext} = min({S_blk}, {S_dim} - {S_pos})
        s_strips = ({S_ext} + {S_tile} - 1) // {S_tile}
        s_first = {S_first}
        for kb0 in range(0, k_blocks, group):
            kbs = min(group, k_blocks - kb0)
            for t in prange(kbs * (s_strips - s_first)):
                g, s = t // (s_strips - s_first), s_first + t % (s_strips - s_first)
                pc = (kb0 + g) * kc
                kcb = min(kc, k - pc)
                {S_strips}
            for ib in prange(blocks):
                mine = numba.get_thread_id()
                {P_pos} = ib * {P_blk}
                {P_ext} = min({P_blk}, {P_dim} - {P_pos})
                p_strips = ({P_ext} + {P_tile} - 1) // {P_tile}
                p_first = {P_first}
                for g in range(kbs):
                    pc = (kb0 + g) * kc
                    kcb = min(kc, k - pc)
                    {P_strips}
                    tiles(a, k, {a_pack}, pack_a, ic, mcb, pc, kcb, {b_pack}, jc, ncb, c, n, pc == 0,
                          epilogue if pc + kcb == k else 0, bias, residual, scratch[mine])
'''


def driver_source(parallel: str) -> str:
    """The driver for `parallel` "m" (B shared, threads over M blocks) or "n" (A shared, threads over N blocks)."""
    shared, private = ("B", "A") if parallel == "m" else ("A", "B")
    s, p = _ROLES[shared], _ROLES[private]
    slices = {shared: f"{s['pack']}[g * panel:(g + 1) * panel]", private: f"{p['pack']}[mine]"}
    fields = {f"S_{k}": v for k, v in s.items()} | {f"P_{k}": v for k, v in p.items()}
    fields["S_first"] = s["first"].format(strips="s_strips")
    fields["P_first"] = p["first"].format(strips="p_strips")
    fields["S_strips"] = s["strips"].format(lo="s", hi="s + 1", dst=slices[shared])
    fields["P_strips"] = p["strips"].format(lo="p_first", hi="p_strips", dst=slices[private])
    fields["a_pack"], fields["b_pack"] = slices["A"], slices["B"]
    return _DRIVER.format(**fields)


def module_source(spec: KernelSpec) -> str:
    """The whole module of one spec: constants, micro-kernel, epilogue, packing, tiles, driver."""
    codes = "\n".join(f"E_{e.name.upper()} = {e.code}" for e in EPILOGUES)
    text = "\n".join([
        f'"""Tracea CPU GEMM {spec.name} (generator {GENERATOR_VERSION}): generated by ops/gemm/families/numba.py."""',
        "import math",
        "",
        f"MR = {spec.mr}",
        f"NR = {spec.nr}",
        f"LINE = {spec.line}  # elements per 64-byte cache line",
        f"LANES = {spec.lanes}  # elements per vector",
        'FASTMATH = {"contract"}  # FMAs are explicit (llvm.fma) in the micro-kernel; elsewhere no reassociation',
        'PARALLEL = {"fusion": False}  # packing and computing are two parallel loops in a row: never fuse them',
        codes,
    ])
    micro = "".join("\n\n\n@njit(fastmath=FASTMATH, cache=CACHE)\n"
                    + micro_kernel_source(spec.mr, spec.nr, spec.lanes, packed=packed, prefetch=spec.line)
                    for packed in (False, True))  # A in place, A packed
    return text + micro + SILU_SPAN + _EPILOGUE + _PACK_A + PACK_STRIP + _TILES + driver_source(spec.parallel)


def signature(dtype: str) -> str:
    """The driver's numba signature: A, B, C, residual as C-contiguous matrices, bias a vector, then the sizes."""
    t = _NUMBA_TYPES[dtype]
    matrix, vector = f"{t}[:, ::1]", f"{t}[::1]"
    return (f"void({matrix}, {matrix}, {matrix}, {vector}, {matrix}, intp, intp, intp, boolean, boolean, intp, intp, "
            "intp)")


def numba_launch(problem: GemmProblem, config: Mapping[str, Value]) -> LaunchPlan:
    itemsize = np.dtype(NUMPY_DTYPES[problem.dtype]).itemsize
    values = {"mc": int(config["mc"]), "kc": int(config["kc"]), "nc": int(config["nc"]),
              "pack_a": bool(config["pack_a"]), "nt": problem.layout == "nt", "epilogue": problem.fused.code,
              "budget": SHARED_PACK_BYTES // itemsize}
    return LaunchPlan(steps=(CallStep(ENTRY, signature(problem.dtype), PARAMS, values, int(config["threads"])),),
                      family="numba")


def numba_args(problem: GemmProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The host arrays the driver takes (a missing bias or residual as an empty array of the dtype)."""
    dt = NUMPY_DTYPES[problem.dtype]
    return {"A": operands["A"], "B": operands["B"], "C": operands["C"],
            "bias": operands["bias"] if problem.has_bias else np.empty(0, dt),
            "residual": operands["residual"] if problem.has_residual else np.empty((0, 0), dt)}


NUMBA = NumbaFamily(DTYPES, gemm_space, lambda problem, config: module_source(KernelSpec.of(problem, config)),
                    numba_launch, numba_args, hand_picked, Path(__file__))
