"""On a GPU: the FA2-style attention family's first picks checked against the float64 reference (through the one
check path, backends/checked.py: fresh inputs, NaN-poisoned outputs) for L in {1, 17, 1000, 4097}, causal and not,
every head dim, fp16 and bf16, grouped-query heads, both layouts, lse, and decode (L_q = 1 against L_k = 8192).
Marked `gpu`; skipped where CuPy or a CUDA device is missing. (Speed is benchmarks/attention_h200.py's job.)

On an H200: pytest tests/engine_cuda/test_attention_gpu.py -q
"""

from __future__ import annotations

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.registry import get_op

pytestmark = pytest.mark.gpu

OP = get_op("attention")
BACKEND = OpBackend("attention", "cuda")

SHAPES = [  # problem fields beyond batch 2, heads 4
    *(dict(seq=seq, head_dim=d, causal=causal, dtype=dtype)
      for seq in (1, 17, 1000, 4097) for d in (64, 128, 256) for causal in (False, True)
      for dtype in (("bf16", "fp16") if seq == 1000 else ("bf16",))),
    dict(seq=1000, head_dim=128, heads=8, kv_heads=2, causal=True, layout="blhd", lse=True),
    dict(seq=777, seq_k=2000, head_dim=64, heads=8, kv_heads=1, causal=True, lse=True, dtype="fp16"),
    dict(seq=1, seq_k=8192, head_dim=128, heads=32, kv_heads=8, dtype="bf16"),
    dict(seq=1, seq_k=8192, head_dim=64, heads=16, causal=True, layout="blhd", lse=True, dtype="fp16"),
]


def _label(fields):
    return "-".join(f"{k}{v}" for k, v in fields.items())


@pytest.mark.parametrize("fields", SHAPES, ids=[_label(f) for f in SHAPES])
def test_the_first_picks_are_correct_on_the_gpu(fields, gpu_target):
    p = OP.problem(**{"batch": 2, "heads": 4, **fields})
    failures, checked = [], 0
    for family, _ in BACKEND.spaces(p, gpu_target):
        for config in family.suggested(p, gpu_target)[:2]:
            ev = BACKEND.check(BACKEND.compile(p, config, gpu_target), p, gpu_target, seed=checked)
            checked += 1
            if not ev.ok:
                failures.append(f"{config}: {ev.status.value}: {ev.reason}")
    assert checked and not failures, failures
