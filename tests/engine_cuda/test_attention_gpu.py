"""On a GPU: the FA2-style attention family's first picks checked against the float64 reference (through the one
check path, backends/checked.py: fresh inputs, NaN-poisoned outputs) for L in {1, 17, 1000, 4097}, causal and not,
every head dim, fp16 and bf16, grouped-query heads, both layouts, lse, and decode (L_q = 1 against L_k = 8192).
Split-KV (kv_splits 2 to 32: the split kernel, the combine and the workspace between them) on decode-like shapes:
L_q 1 to 16 against ragged L_k up to 32768, causal and not, grouped-query heads, lse, both layouts, every head dim.
Marked `gpu`; skipped where CuPy or a CUDA device is missing. (Speed is benchmarks/attention_h200.py's job.)

On an H200: pytest tests/engine_cuda/test_attention_gpu.py -q
"""

from __future__ import annotations

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.attention.families.fa2_space import KV_SPLITS, fa2_space
from tracea_cli.ops.registry import get_op

pytestmark = pytest.mark.gpu

OP = get_op("attention")
BACKEND = OpBackend("attention", "cuda")
OP_FAMILY = next(f for f in OP.families if f.name == "fa2")

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


SPLIT_SHAPES = [  # problem fields beyond batch 2, 32 query heads, 8 K/V heads
    dict(seq=1, seq_k=8192, head_dim=128, dtype="bf16"),
    dict(seq=1, seq_k=32768, head_dim=128, dtype="bf16", batch=1),
    dict(seq=1, seq_k=1000, head_dim=64, causal=True, lse=True, dtype="fp16"),
    dict(seq=4, seq_k=4099, head_dim=128, causal=True, layout="blhd", dtype="bf16"),
    dict(seq=16, seq_k=2050, head_dim=256, causal=True, lse=True, dtype="bf16"),
    dict(seq=13, seq_k=1024, head_dim=64, kv_heads=32, dtype="fp16", layout="blhd"),
]


@pytest.mark.parametrize("fields", SPLIT_SHAPES, ids=[_label(f) for f in SPLIT_SHAPES])
def test_split_kv_is_correct_on_the_gpu_for_every_kv_splits(fields, gpu_target):
    p = OP.problem(**{"batch": 2, "heads": 32, "kv_heads": 8, **fields})
    space = fa2_space(p, gpu_target)
    first = OP_FAMILY.suggested(p, gpu_target)[0]
    assert first["kv_splits"] > 1, first  # decode-like: the first pick splits the keys
    failures, checked = [], 0
    for splits in KV_SPLITS:
        config = {**first, "kv_splits": splits}
        if space.why_invalid(config) is not None:
            continue
        ev = BACKEND.check(BACKEND.compile(p, config, gpu_target), p, gpu_target, seed=checked)
        checked += 1
        if not ev.ok:
            failures.append(f"{config}: {ev.status.value}: {ev.reason}")
    assert checked >= 4 and not failures, failures
