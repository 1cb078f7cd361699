"""The FA2-style attention kernel's own code, run on the CPU by the host emulator (tests/engine_cuda/emulator/:
attention_main.cpp, attention_harness.py, attention_emulation.h for the warp shuffles), checked like on a GPU against
the float64 reference: L in {1, 17, ~100} causal and not, L_q != L_k (decode, a query block against a longer cache),
grouped-query heads, lse, both layouts, fp16 and bf16, head dims 64 and 128, pipelines of 2 and 3 stages, query and
key tiles that do not divide the sequences.

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


def _cfg(bm, bn, warps, stages=2):
    return {"family": "fa2", "block_m": bm, "block_n": bn, "warps": warps, "stages": stages}


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
