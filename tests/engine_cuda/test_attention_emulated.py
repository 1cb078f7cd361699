"""The FA2-style attention kernel's own code, run on the CPU by the host emulator (tests/engine_cuda/emulator/:
attention_main.cpp, attention_harness.py, attention_emulation.h for the warp shuffles), checked like on a GPU against
the float64 reference: L in {1, 17, ~100} causal and not, L_q != L_k (decode, a query block against a longer cache),
grouped-query heads, lse, both layouts, fp16 and bf16, head dims 64 and 128, pipelines of 2 and 3 stages, query and
key tiles that do not divide the sequences.

Split-KV configurations (kv_splits > 1: the split kernel, then the combine, through a NaN-poisoned workspace) run
for 2 to 32 chunks, causal and not, grouped-query heads, lse, both layouts, key lengths that leave a ragged last block
and chunks that a causal query block does not see at all. Packed GQA (pack_gqa = 1: one block per K/V head holding the
rows of its G query heads) runs for G = 2, 4 and 8, L_q of 1 and a few rows, query blocks that span two heads,
causal and not with L_q < L_k, ragged key blocks, lse, both dtypes.

What the emulator proves: indexing, masking of ragged tails and of the causal diagonal, fragments (ldmatrix, .trans,
mma.sync), the online softmax and the epilogue, for the exact source NVRTC compiles. TRACEA_SLOW_TESTS=1 adds the
cases that repeat a feature at another size (fp16 lse, blhd GQA non-causal, head dim 128 with L_q > L_k). What it
cannot: timing, the asynchrony of cp.async, registers and banks (the GPU tests and the benchmark cover those).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.ops.attention.families.fa2 import FA2
from tracea_cli.ops.attention.families.fa2_space import tiling
from tracea_cli.ops.attention.problem import make_inputs, reference
from tracea_cli.ops.registry import get_op
from tracea_cli.ops.verify import check

OP = get_op("attention")
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def attention_emulator(emulator, tmp_path_factory):
    spec = importlib.util.spec_from_file_location("tracea_attention_harness",
                                                  HERE / "emulator" / "attention_harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    workdir = tmp_path_factory.mktemp("attention-emulator")
    return harness, workdir, harness.build_launcher(workdir)


def _cfg(bm, bn, warps, stages=2, kv_splits=None, pack_gqa=None):
    cfg = {"family": "fa2", "block_m": bm, "block_n": bn, "warps": warps, "stages": stages}
    cfg = cfg if kv_splits is None else {**cfg, "kv_splits": kv_splits}
    return cfg if pack_gqa is None else {**cfg, "pack_gqa": pack_gqa}


SLOW = pytest.mark.skipif(not os.environ.get("TRACEA_SLOW_TESTS"), reason="opt in: TRACEA_SLOW_TESTS=1")
CASES = [  # (problem fields, configuration, marks): the default run covers every feature once
    (dict(seq=1, seq_k=1), _cfg(16, 16, 1), ()),
    (dict(seq=17, causal=True), _cfg(16, 16, 1), ()),
    (dict(seq=17, dtype="fp16", lse=True), _cfg(32, 16, 2), (SLOW,)),
    (dict(seq=100, causal=True, lse=True), _cfg(64, 32, 2, 3), ()),
    (dict(seq=100, layout="blhd", heads=4, kv_heads=2), _cfg(32, 64, 1), (SLOW,)),
    (dict(seq=1, seq_k=100, causal=True, heads=4, kv_heads=1, lse=True, dtype="fp16"), _cfg(16, 32, 1), ()),
    (dict(seq=37, seq_k=90, causal=True, layout="blhd", heads=3, kv_heads=1), _cfg(32, 32, 2, 3), ()),
    (dict(seq=70, seq_k=33, head_dim=128, dtype="fp16"), _cfg(32, 32, 2), (SLOW,)),
    (dict(seq=45, head_dim=128, causal=True, batch=2, heads=2, lse=True), _cfg(64, 16, 4, 3), ()),
    (dict(seq=20, seq_k=40, head_dim=256, causal=True, heads=2, kv_heads=1), _cfg(16, 16, 1), ()),
    # split-KV: decode with GQA and lse, 13 key blocks in 4 chunks, the last block ragged
    (dict(seq=1, seq_k=200, heads=4, kv_heads=1, lse=True), _cfg(16, 16, 1, kv_splits=4), ()),
    # causal decode (the one row sees every key), 11 blocks in 8 chunks, fp16
    (dict(seq=1, seq_k=333, causal=True, heads=4, kv_heads=2, dtype="fp16"), _cfg(16, 32, 1, kv_splits=8), ()),
    # causal query blocks: the first one's last chunk is masked entirely (rows 0-15 see keys <= 75 of 100)
    (dict(seq=40, seq_k=100, causal=True, lse=True), _cfg(16, 16, 1, 3, kv_splits=4), ()),
    # blhd, GQA, head dim 128, two warps, 2 chunks of 9 blocks
    (dict(seq=20, seq_k=257, layout="blhd", heads=4, kv_heads=2, head_dim=128), _cfg(32, 32, 2, kv_splits=2), ()),
    # 32 chunks of one or two blocks (33 blocks, the last ragged)
    (dict(seq=2, seq_k=520, causal=True, heads=2, kv_heads=1), _cfg(16, 16, 1, kv_splits=32), ()),
    # packed GQA: decode 4:1 with lse, 13 key blocks (the last ragged) in 4 chunks; 4 valid rows of the 16
    (dict(seq=1, seq_k=200, heads=4, kv_heads=1, lse=True), _cfg(16, 16, 1, kv_splits=4, pack_gqa=1), ()),
    # 8:1, three causal rows against 300 keys, fp16: 24 packed rows, the first 16-row block spans heads 0-5
    (dict(seq=3, seq_k=300, causal=True, heads=8, kv_heads=1, dtype="fp16"), _cfg(16, 32, 1, kv_splits=4, pack_gqa=1),
     ()),
    # 2:1 causal, 40 rows against 100 keys: block 0's last chunk is masked entirely, block 2 spans both heads
    (dict(seq=40, seq_k=100, causal=True, heads=4, kv_heads=2, lse=True), _cfg(16, 16, 1, 3, kv_splits=4, pack_gqa=1),
     ()),
    # 4:1 (two K/V heads, batch 2), blhd, 5 rows against 77 keys, lse, a 32-row block on 2 warps (20 rows valid)
    (dict(seq=5, seq_k=77, layout="blhd", batch=2, heads=8, kv_heads=2, lse=True, dtype="fp16"),
     _cfg(32, 16, 2, kv_splits=2, pack_gqa=1), (SLOW,)),
    # 8:1 decode, head dim 128, causal, bf16, 64-key blocks in 8 chunks
    (dict(seq=1, seq_k=1000, causal=True, heads=8, kv_heads=1, head_dim=128), _cfg(16, 64, 1, kv_splits=8, pack_gqa=1),
     (SLOW,)),
    # 4:1, 20 causal rows, 80 packed rows in 64-row blocks on 4 warps, 3 stages
    (dict(seq=20, seq_k=150, causal=True, heads=4, kv_heads=1, lse=True), _cfg(64, 32, 4, 3, kv_splits=2, pack_gqa=1),
     (SLOW,)),
]


def _emulate(attention_emulator, p, config, seed, name, source=None):
    harness, workdir, launcher = attention_emulator
    exe = harness.build(source or FA2.source(p, config), tiling(p, config).smem_bytes, workdir / name, launcher)
    inputs = make_inputs(p, np.random.default_rng(seed))
    return harness.run(exe, p, FA2, config, inputs, workdir / name), reference(p, inputs)


@pytest.mark.parametrize("case", [pytest.param(i, marks=c[2], id=f"case{i}") for i, c in enumerate(CASES)])
def test_emulated_kernel_matches_the_reference(case, attention_emulator, sm80, sm90):
    fields, config, _ = CASES[case]
    p = OP.problem(**{"batch": 1, "heads": 2, "head_dim": 64, "dtype": "bf16", **fields})
    for target in (sm80, sm90):
        assert FA2.space(p, target).why_invalid(config) is None, (p.label, target.arch)
    got, ref = _emulate(attention_emulator, p, config, seed=case, name=f"case{case}")
    verdict = check(got["out"], ref["out"], p.dtype)
    assert verdict.ok, (p.label, config, verdict.reason)
    if p.lse:
        verdict = check(got["lse"], ref["lse"], "fp32")
        assert verdict.ok, (p.label, config, "lse", verdict.reason)


def test_the_emulator_catches_a_wrong_mask(attention_emulator):
    """A causal mask one key too generous must fail the check: the emulation is not vacuous."""
    p = OP.problem(batch=1, heads=1, seq=40, head_dim=64, dtype="bf16", causal=True)
    config = _cfg(16, 16, 1)
    right = FA2.source(p, config)
    wrong = right.replace("col > row + offset", "col > row + offset + 1")
    assert wrong != right
    got, ref = _emulate(attention_emulator, p, config, seed=3, name="wrong", source=wrong)
    assert not check(got["out"], ref["out"], p.dtype).ok


def test_the_emulator_catches_a_wrong_combine(attention_emulator):
    """A combine that forgets to weigh the chunks by their softmax mass must fail: the split path is not vacuous."""
    p = OP.problem(batch=1, heads=2, seq=1, seq_k=200, head_dim=64, dtype="bf16")
    config = _cfg(16, 16, 1, kv_splits=4)
    right = FA2.source(p, config)
    wrong = right.replace("const float w = exp2f(lz - base);", "const float w = 1.f;")
    assert wrong != right
    got, ref = _emulate(attention_emulator, p, config, seed=5, name="wrong-combine", source=wrong)
    assert not check(got["out"], ref["out"], p.dtype).ok


def test_the_emulator_catches_a_wrong_packing(attention_emulator):
    """Packed rows that all read their K/V head's first query head (the unpacked block's Q rows) must fail: the
    packed path is not vacuous."""
    p = OP.problem(batch=1, heads=4, kv_heads=1, seq=3, seq_k=100, head_dim=64, dtype="bf16", causal=True)
    config = _cfg(16, 16, 1, kv_splits=2, pack_gqa=1)
    right = FA2.source(p, config)
    wrong = right.replace("return gq + head_of(m0 + r) * (long long)args.q_sh",
                          "return gq + head0 * (long long)args.q_sh")
    assert wrong != right
    got, ref = _emulate(attention_emulator, p, config, seed=7, name="wrong-packing", source=wrong)
    assert not check(got["out"], ref["out"], p.dtype).ok
