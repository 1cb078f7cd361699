"""On a GPU: the lowrank-mlp families' first picks on awkward shapes (ragged M, ranks 16/48/100/256/300, d_in ≠ d_out,
every activation, residual, both layouts, both intermediates, fp16/bf16/fp32), checked against the float64
reference; and the torch / cuBLAS unfused baselines checked the same way. Marked `gpu`; skipped where CuPy or a CUDA
device is missing. (Speed is benchmarks/lowrank_mlp_h200.py's job, not a test's.)"""

from __future__ import annotations

import importlib.util

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.registry import get_op

pytestmark = pytest.mark.gpu

OP = get_op("lowrank-mlp")
BACKEND = OpBackend("lowrank-mlp", "cuda")
SHAPES = [  # (m, d_in, rank, d_out, dtype, act, residual, layout, intermediate)
    (1000, 512, 16, 768, "fp16", "silu", False, "nn", "dtype"),
    (777, 1024, 48, 512, "bf16", "gelu", True, "nt", "dtype"),
    (3000, 1000, 100, 1500, "fp16", "relu", True, "nn", "fp32"),
    (513, 4096, 256, 1024, "bf16", "none", False, "nt", "fp32"),
    (1000, 1024, 300, 1024, "fp16", "silu", False, "nn", "dtype"),
    (513, 640, 100, 700, "fp32", "relu", True, "nn", "dtype"),
    # a long d_in in fp32: one accumulator over all of K failed the fp32 bound (2.9e-5 at K = 4096)
    (256, 4096, 64, 1024, "fp32", "silu", False, "nn", "dtype"),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[4]}-r{s[2]}-{s[7]}-{s[8]}")
def test_every_familys_first_picks_are_correct_on_the_gpu(shape, gpu_target):
    m, d_in, rank, d_out, dtype, act, residual, layout, intermediate = shape
    p = OP.problem(m=m, d_in=d_in, rank=rank, d_out=d_out, dtype=dtype, act=act, residual=residual, layout=layout,
                   intermediate=intermediate)
    failures, checked = [], 0
    for family, _ in BACKEND.spaces(p, gpu_target):
        for config in family.suggested(p, gpu_target)[:2]:
            ev = BACKEND.check(BACKEND.compile(p, config, gpu_target), p, gpu_target, seed=checked)
            checked += 1
            if not ev.ok:
                failures.append(f"{config}: {ev.status.value}: {ev.reason}")
    assert checked and not failures, failures


@pytest.mark.parametrize("name", ["torch", "cublas"])
def test_the_unfused_baselines_are_correct_on_the_gpu(name, gpu_target):
    if name == "torch" and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    p = OP.problem(m=1000, d_in=512, rank=48, d_out=768, dtype="fp16", act="silu", residual=True)
    label, ev = BACKEND.baseline(p, gpu_target, policy=None, seed=1, name=name)
    assert ev.ok and label == f"{name}-unfused", (label, ev.reason)
