"""The CPU attention family: one pass of online softmax per block of query rows, as numba source.

    prange over work items (batch b, query head h, block of bm query rows), one per thread at a time:
      copy the block's rows of Q, times the scale, into a contiguous buffer
      for each block of bn keys from the first up to the last one any row of the block sees (causal: later blocks
      are skipped):
        copy those rows of K and V (of key/value head h // group) into contiguous tiles
        per query row: its bn scores (masked ones -inf), the new running max m', the factor e^(m − m') by which the
        running sum l and output row are rescaled, then l += Σ e^(s − m') and out_row += Σ e^(s − m')·v
      out = out_row / l, and lse = m + ln l where asked

Every row sees key 0 (the causal rule refuses L_q > L_k), so the first key block gives every row a finite max and no
row divides by zero. Accumulation is in the dtype (fp32 or fp64). The layout (bhld or blhd) is a run-time flag that
only the copies into the buffers read; bm, bn, the mask and the lse flag are run-time arguments too, so `source` is
one module per dtype. The module relies on what the CPU runtime puts in front of it (backends/cpu.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tracea_cli.ops.attention.families.numba_space import DTYPES, attention_space, hand_picked
from tracea_cli.ops.attention.problem import AttentionProblem, check_operands
from tracea_cli.ops.launch import CallStep, LaunchPlan
from tracea_cli.ops.numba_family import NumbaFamily
from tracea_cli.space import Value

GENERATOR_VERSION = 1  # bump when the module text changes in a way the template below does not show
ENTRY = "attention"
PARAMS = ("q", "k", "v", "out", "lse", "bm", "bn", "blhd", "causal", "write_lse")
NUMPY_DTYPES = {"fp32": np.float32, "fp64": np.float64}
_NUMBA_TYPES = {"fp32": "float32", "fp64": "float64"}

# attention(q, k, v, out, lse, bm, bn, blhd, causal, write_lse): q, k, v, out C-contiguous 4-d arrays in the layout
# (blhd: B × L × H × D, else B × H × L × D); lse B × H × L_q float32, empty where not written.
_DRIVER = '''
@njit(parallel=PARALLEL, fastmath=FASTMATH, cache=CACHE)
def attention(q, k, v, out, lse, bm, bn, blhd, causal, write_lse):
    if blhd:
        batch, lq, heads, d = q.shape
        lk, kv_heads = k.shape[1], k.shape[2]
    else:
        batch, heads, lq, d = q.shape
        kv_heads, lk = k.shape[1], k.shape[2]
    group = heads // kv_heads
    offset = lk - lq  # causal: row i sees keys j <= i + offset
    scale = 1.0 / np.sqrt(d)
    row_blocks = (lq + bm - 1) // bm
    for w in prange(batch * heads * row_blocks):
        rb = w % row_blocks
        h = (w // row_blocks) % heads
        b = w // (row_blocks * heads)
        kvh = h // group
        i0 = rb * bm
        rows = min(bm, lq - i0)
        qt = np.empty((bm, d), dtype=q.dtype)
        acc = np.zeros((bm, d), dtype=q.dtype)
        kt = np.empty((bn, d), dtype=q.dtype)
        vt = np.empty((bn, d), dtype=q.dtype)
        s = np.empty(bn, dtype=q.dtype)
        m = np.empty(bm, dtype=q.dtype)
        total = np.zeros(bm, dtype=q.dtype)
        for r in range(rows):
            m[r] = -np.inf
            for e in range(d):
                qt[r, e] = (q[b, i0 + r, h, e] if blhd else q[b, h, i0 + r, e]) * scale
        kv_end = min(lk, i0 + rows + offset) if causal else lk  # one past the last key the block's last row sees
        for j0 in range(0, kv_end, bn):
            cols = min(bn, kv_end - j0)
            for c in range(cols):
                for e in range(d):
                    kt[c, e] = k[b, j0 + c, kvh, e] if blhd else k[b, kvh, j0 + c, e]
                    vt[c, e] = v[b, j0 + c, kvh, e] if blhd else v[b, kvh, j0 + c, e]
            for r in range(rows):
                seen = min(cols, i0 + r + offset + 1 - j0) if causal else cols  # keys of this block row r sees
                if seen <= 0:
                    continue
                new_max = m[r]
                for c in range(seen):
                    dot = qt[r, 0] * kt[c, 0]
                    for e in range(1, d):
                        dot += qt[r, e] * kt[c, e]
                    s[c] = dot
                    if dot > new_max:
                        new_max = dot
                alpha = np.exp(m[r] - new_max)  # 0 on the first block (m = -inf), else <= 1
                row_sum = total[r] * alpha
                for e in range(d):
                    acc[r, e] *= alpha
                for c in range(seen):
                    p = np.exp(s[c] - new_max)
                    row_sum += p
                    for e in range(d):
                        acc[r, e] += p * vt[c, e]
                total[r] = row_sum
                m[r] = new_max
        for r in range(rows):
            inv = 1.0 / total[r]
            for e in range(d):
                if blhd:
                    out[b, i0 + r, h, e] = acc[r, e] * inv
                else:
                    out[b, h, i0 + r, e] = acc[r, e] * inv
            if write_lse:
                lse[b, h, i0 + r] = m[r] + np.log(total[r])
'''


def module_source(dtype: str) -> str:
    """The whole module of one dtype: its settings and the driver."""
    return "\n".join([
        f'"""Tracea CPU attention {dtype} (generator {GENERATOR_VERSION}): generated by '
        'ops/attention/families/numba.py."""',
        f"DTYPE = {dtype!r}  # the compiled signature's element type (part of the text, so of the module's hash)",
        '# reassociation lets LLVM vectorise the dot products and row sums; no nnan/ninf: NaN and -inf must survive',
        'FASTMATH = {"contract", "reassoc"}',
        "PARALLEL = True",
        "",
    ]) + _DRIVER


def signature(dtype: str) -> str:
    """The driver's numba signature: q, k, v, out C-contiguous 4-d arrays of the dtype, lse a float32 3-d array,
    then bm, bn and the flags."""
    t = _NUMBA_TYPES[dtype]
    tensor = f"{t}[:, :, :, ::1]"
    return f"void({tensor}, {tensor}, {tensor}, {tensor}, float32[:, :, ::1], intp, intp, boolean, boolean, boolean)"


def numba_launch(problem: AttentionProblem, config: Mapping[str, Value]) -> LaunchPlan:
    values = {"bm": int(config["bm"]), "bn": int(config["bn"]), "blhd": problem.layout == "blhd",
              "causal": problem.causal, "write_lse": problem.lse}
    return LaunchPlan(steps=(CallStep(ENTRY, signature(problem.dtype), PARAMS, values, int(config["threads"])),),
                      family="numba")


def numba_args(problem: AttentionProblem, operands: Mapping[str, Any]) -> dict[str, Any]:
    """The host arrays the driver takes (lse as an empty float32 array where the problem has none)."""
    check_operands(problem, operands)
    return {"q": operands["q"], "k": operands["k"], "v": operands["v"], "out": operands["out"],
            "lse": operands["lse"] if problem.lse else np.empty((0, 0, 0), np.float32)}


NUMBA = NumbaFamily(DTYPES, attention_space, lambda problem, config: module_source(problem.dtype), numba_launch,
                    numba_args, hand_picked, Path(__file__))
