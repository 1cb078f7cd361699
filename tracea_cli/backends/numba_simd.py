"""A vector vocabulary for numba kernels: explicit SIMD registers, which numba itself lacks.

numba runs LLVM without the SLP vectoriser, so a loop-free tile of scalar accumulators stays scalar. These
intrinsics give a kernel explicit vectors of `lanes` elements (a 512-bit register holds 16 fp32 or 8 fp64 lanes):

    vload(array, index, lanes)    lanes contiguous elements of a 1-D array from index (unaligned load)
    vsplat(array, index, lanes)   one element broadcast to every lane
    vzero(like, lanes)            zeros of the element type of the array `like`
    vfma(a, b, c)                 a*b + c lane by lane, rounded once (llvm.fma)
    vadd(a, b)                    a + b lane by lane
    vstore(array, index, vector)  the vector into lanes contiguous elements from index
    vprefetch(array, index, level) a hint: the cache line of array[index] into L1 (level 1) or L2 (level 2)
    vsilu(a)                      x / (1 + exp(-x)) lane by lane, exp by a polynomial (epilogues' SiLU)

LLVM keeps such vectors in registers and emits packed instructions (vfmadd231ps/pd on zmm where AVX-512 is present,
split into ymm/xmm halves elsewhere). No bounds checks: callers keep indices valid. The CPU runtime (backends/cpu.py)
puts these names in front of every kernel module it compiles.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

__all__ = ["vadd", "vfma", "vload", "vprefetch", "vsilu", "vsplat", "vstore", "vzero"]


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
def vload(typingctx, array, index, lanes):
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
def vsplat(typingctx, array, index, lanes):
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
def vzero(typingctx, like, lanes):
    """A vector of zeros with the element type of the array `like`."""
    if not isinstance(lanes, types.IntegerLiteral):
        return None
    vec = _Vec(like.dtype, lanes.literal_value)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(vec), None)

    return vec(like, lanes), codegen


@intrinsic
def vfma(typingctx, a, b, c):
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
def vadd(typingctx, a, b):
    if not (isinstance(a, _Vec) and a == b):
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return a(a, b), codegen


@intrinsic
def vstore(typingctx, array, index, vec):
    """Store a vector into `lanes` contiguous elements of a 1-D array starting at `index`."""
    if not (isinstance(vec, _Vec) and vec.dtype == array.dtype):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        vptr = builder.bitcast(ptr, ir.PointerType(context.get_value_type(vec)))
        builder.store(args[2], vptr, align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.void(array, index, vec), codegen


@intrinsic
def vprefetch(typingctx, array, index, level):
    """Fetch the cache line of element `index` of a 1-D array towards the core: `level` 1 into L1 (prefetcht0),
    2 into L2 (prefetcht1). A hint (llvm.prefetch): it never faults, whatever the address, and changes no result."""
    if not (isinstance(array, types.Array) and isinstance(level, types.IntegerLiteral)
            and level.literal_value in (1, 2)):
        return None
    locality = 4 - level.literal_value  # llvm: 3 keeps the line in every level, 2 skips L1

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        i8p = ir.PointerType(ir.IntType(8))
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, locality),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, index, level), codegen


# ---- SiLU on vectors (for epilogues: numba's math.exp is one scalar libm call per element) ------------------------

# Cody-Waite range reduction and Cephes' approximations (expf: a degree-5 polynomial; exp: a Pade form), to about 1
# ulp over the clamped range. x is clamped to [lo, hi] first, so that 2^n stays a normal number: exp of x below lo
# comes out as exp(lo) (the least normal float, about 1e-38 / 2e-308) instead of a subnormal or 0, above hi as
# exp(hi) instead of up to the largest finite value or inf. NaN stays NaN (the clamps compare, they do not min/max).
_EXP = {
    32: {"lo": -87.33654475, "hi": 88.37626266, "ln2_hi": 0.693359375, "ln2_lo": -2.12194440e-4,
         "poly": (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                  5.0000001201e-1), "bias": 127, "shift": 23},
    64: {"lo": -708.3964185322641, "hi": 709.0, "ln2_hi": 6.93145751953125e-1, "ln2_lo": 1.42860682030941723212e-6,
         "p": (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1),
         "q": (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
               2.00000000000000000009e0), "bias": 1023, "shift": 52},
}
_LOG2E = 1.4426950408889634


def _splat(vtype, value):
    return ir.Constant(vtype, [ir.Constant(vtype.element, value)] * vtype.count)


def _exp_ir(builder, x):
    """IR for exp of the float vector `x` (see _EXP)."""
    vtype = x.type
    bits = 32 if isinstance(vtype.element, ir.FloatType) else 64
    k = _EXP[bits]
    module = builder.module
    suffix = f"v{vtype.count}f{bits}"

    def intrinsic_fn(name, args):
        return cgutils.get_or_insert_function(module, ir.FunctionType(vtype, [vtype] * args), f"llvm.{name}.{suffix}")

    def fma(a, b, c):
        return builder.call(intrinsic_fn("fma", 3), [a, b, c])

    lo, hi = _splat(vtype, k["lo"]), _splat(vtype, k["hi"])
    x = builder.select(builder.fcmp_ordered(">", x, hi), hi, x)
    x = builder.select(builder.fcmp_ordered("<", x, lo), lo, x)
    n = builder.call(intrinsic_fn("rint", 1), [builder.fmul(x, _splat(vtype, _LOG2E))])
    r = fma(n, _splat(vtype, -k["ln2_hi"]), x)
    r = fma(n, _splat(vtype, -k["ln2_lo"]), r)
    one = _splat(vtype, 1.0)
    if bits == 32:
        p = _splat(vtype, k["poly"][0])
        for c in k["poly"][1:]:
            p = fma(p, r, _splat(vtype, c))
        y = builder.fadd(fma(p, builder.fmul(r, r), r), one)
    else:
        rr = builder.fmul(r, r)
        p = _splat(vtype, k["p"][0])
        for c in k["p"][1:]:
            p = fma(p, rr, _splat(vtype, c))
        p = builder.fmul(p, r)
        q = _splat(vtype, k["q"][0])
        for c in k["q"][1:]:
            q = fma(q, rr, _splat(vtype, c))
        y = fma(_splat(vtype, 2.0), builder.fdiv(p, builder.fsub(q, p)), one)
    # 2^n: n (an integer within the exponent's range after the clamp; NaN taken as 0, y is NaN then) plus the
    # exponent bias, in the exponent field
    itype = ir.VectorType(ir.IntType(bits), vtype.count)
    n = builder.select(builder.fcmp_unordered("uno", n, n), _splat(vtype, 0.0), n)
    e = builder.add(builder.fptosi(n, itype),
                    ir.Constant(itype, [ir.Constant(itype.element, k["bias"])] * vtype.count))
    scale = builder.bitcast(builder.shl(e, ir.Constant(itype, [ir.Constant(itype.element, k["shift"])] * vtype.count)),
                            vtype)
    return builder.fmul(y, scale)


@intrinsic
def vsilu(typingctx, x):
    """SiLU of each lane: x / (1 + exp(-x)), exp as `_exp_ir` computes it (about 1 ulp). NaN stays NaN."""
    if not isinstance(x, _Vec):
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        e = _exp_ir(builder, builder.fneg(v))
        return builder.fdiv(v, builder.fadd(_splat(v.type, 1.0), e))

    return x(x), codegen
