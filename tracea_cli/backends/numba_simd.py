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

LLVM keeps such vectors in registers and emits packed instructions (vfmadd231ps/pd on zmm where AVX-512 is present,
split into ymm/xmm halves elsewhere). No bounds checks: callers keep indices valid. The CPU runtime (backends/cpu.py)
puts these names in front of every kernel module it compiles.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

__all__ = ["vadd", "vfma", "vload", "vprefetch", "vsplat", "vstore", "vzero"]


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
