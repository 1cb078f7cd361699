"""Writes kernels/cuda/attention_wgmma_mma.cuh: wgmma wrappers whose A operand is in registers (P·V of the attention
wgmma family), one per (N, 16-bit operand type), accumulators as "+f" operands.

The header is committed; tests/engine_hopper/test_attention_wgmma_compile.py keeps it equal to this generator's output.
Regenerate with:  python tests/engine_hopper/attention_mma_header.py > kernels/cuda/attention_wgmma_mma.cuh
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mma_header import accumulators  # noqa: E402  (the GEMM wrappers' generator, beside this file)

NS = (64, 128)  # N = the head dim
TYPES = (("f16", "f16.f16"), ("bf16", "bf16.bf16"))


def _wrapper(tname: str, ptype: str, n: int) -> list[str]:
    regs = n // 2
    reglist, outs = accumulators(regs)
    a = [f"%{regs + i}" for i in range(4)]
    b, sd = regs + 4, regs + 5
    # register A: d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b (no trans-a)
    tail = f"{{{', '.join(a)}}}, %{b}, p, 1, 1, %{sd + 1}"
    ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TransB)'
    return [
        "template <int TransB>",
        f"__device__ __forceinline__ void wgmma_rs_{tname}(float (&d)[{regs}], const unsigned (&a)[4],  // m64n{n}k16",
        "                                                  unsigned long long desc_b, int scale_d) {",
        "  asm volatile(",
        '      "{\\n.reg .pred p;\\n"',
        f'      "setp.ne.b32 p, %{sd}, 0;\\n"',
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptype} {{"',
        f'      "{reglist}}},\\n"',
        f'      "{tail};\\n}}\\n"',
        f"      : {outs}",
        f"      : {ins});",
        "}",
        "",
    ]


def generate() -> str:
    lines = [
        "// wgmma.mma_async wrappers with A in registers: D(64xN, fp32) += A(64x16, four b32 registers per thread,",
        "// the m64k16 A fragment) * B(16xN, a shared-memory descriptor). Generated text: one overload per N (picked",
        "// by the size of the accumulator array) and 16-bit operand type. `TransB` 1: B is N-major in shared memory.",
        "// `scale_d` = 0 overwrites D.",
        "#pragma once",
        "",
    ]
    for tname, ptype in TYPES:
        for n in NS:
            lines += _wrapper(tname, ptype, n)
    return "\n".join(lines)


if __name__ == "__main__":
    print(generate(), end="")
