"""Writes kernels/cuda/gemm_wgmma_mma.cuh: one wgmma wrapper per (N, operand type), accumulators as "+f" operands.

The header is committed; `test_mma_header_is_generated` keeps it equal to this generator's output.
Regenerate with:  python tests/engine_hopper/mma_header.py > kernels/cuda/gemm_wgmma_mma.cuh
"""

from __future__ import annotations

NS = (64, 128, 192, 256)
# name, PTX operand types, K per instruction, whether B may be transposed (16-bit types only)
TYPES = (("f16", "f16.f16", 16, True), ("bf16", "bf16.bf16", 16, True), ("tf32", "tf32.tf32", 8, False))


def accumulators(regs: int) -> tuple[str, str]:
    """The accumulators of a wrapper with `regs` of them: their PTX operand list (16 per line of the asm string) and
    their "+f" constraints (8 per line)."""
    names = [f"%{i}" for i in range(regs)]
    reglist = ',\\n"\n      "'.join(", ".join(names[i : i + 16]) for i in range(0, regs, 16))
    ops = [f'"+f"(d[{i}])' for i in range(regs)]
    outs = ",\n        ".join(", ".join(ops[i : i + 8]) for i in range(0, regs, 8))
    return reglist, outs


def _wrapper(tname: str, ptype: str, k: int, has_trans: bool, n: int) -> list[str]:
    regs = n // 2
    reglist, outs = accumulators(regs)
    a, b, sd = regs, regs + 1, regs + 2
    tail = f"%{a}, %{b}, p, 1, 1" + (f", 0, %{sd + 1}" if has_trans else "")
    ins = '"l"(desc_a), "l"(desc_b), "r"(scale_d)' + (', "n"(TransB)' if has_trans else "")
    lines = ["template <int TransB>"] if has_trans else []
    lines += [
        f"__device__ __forceinline__ void wgmma_{tname}(float (&d)[{regs}], unsigned long long desc_a,  // m64n{n}k{k}",
        "                                                  unsigned long long desc_b, int scale_d) {",
        "  asm volatile(",
        '      "{\\n.reg .pred p;\\n"',
        f'      "setp.ne.b32 p, %{sd}, 0;\\n"',
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptype} {{"',
        f'      "{reglist}}},\\n"',
        f'      "{tail};\\n}}\\n"',
        f"      : {outs}",
        f"      : {ins});",
        "}",
        "",
    ]
    return lines


def generate() -> str:
    lines = [
        "// wgmma.mma_async wrappers: D(64xN, fp32) += A(64xK) * B(KxN), both operands from shared memory (descriptors).",
        "// Generated text: one overload per N (picked by the size of the accumulator array) and operand type; plain inline",
        "// asm keeps the accumulators in registers so that ptxas can pipeline consecutive wgmmas. `scale_d` = 0 overwrites D.",
        "// 16-bit operands take `TransB` (1: B is N-major in shared memory, the nn layout); tf32 is K-major only.",
        "#pragma once",
        "",
    ]
    for tname, ptype, k, has_trans in TYPES:
        for n in NS:
            lines += _wrapper(tname, ptype, k, has_trans, n)
    return "\n".join(lines)


if __name__ == "__main__":
    print(generate(), end="")
