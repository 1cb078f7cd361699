"""attention's baselines on the host: which SDPA backend a profile shows, numpy's blocked softmax, and (where torch is
installed) torch's SDPA by default and pinned, on GQA, both layouts, causal cross attention and lse — each checked
against the float64 reference through the real check path and naming the backend that ran."""

from __future__ import annotations

import importlib.util

import pytest

from tracea_cli.backends.cpu import evaluate_baseline
from tracea_cli.ops.attention.baselines import backend_in_profile
from tracea_cli.ops.registry import get_op
from tracea_cli.target import Target

OP = get_op("attention")
CPU = Target(backend="cpu", device_class="test cpu | 2 threads", threads=2)
HAS_TORCH = importlib.util.find_spec("torch") is not None
PROBLEMS = [dict(batch=2, heads=4, kv_heads=2, seq=17, head_dim=64, causal=True, layout="blhd", dtype="fp32"),
            dict(batch=1, heads=4, kv_heads=1, seq=5, seq_k=70, head_dim=64, causal=True, lse=True, dtype="fp64"),
            dict(batch=1, heads=2, seq=1, seq_k=33, head_dim=128, lse=True, layout="blhd", dtype="fp32")]


def test_the_profile_names_the_backend_that_ran():
    assert backend_in_profile(["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention",
                               "cudnn_generated_fort_native_sdpa"]) == "cudnn"
    assert backend_in_profile(["aten::_scaled_dot_product_flash_attention_for_cpu"]) == "flash"
    assert backend_in_profile(["aten::_efficient_attention_forward", "fmha_cutlassF"]) == "efficient"
    assert backend_in_profile(["aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::_softmax"]) == "math"
    assert backend_in_profile(["aten::bmm", "aten::softmax"]) is None


@pytest.mark.parametrize("kw", PROBLEMS, ids=lambda kw: OP.problem(**kw).label)
def test_numpy_baseline_is_checked_correct(kw):
    p = OP.problem(**kw)
    numpy = next(b for b in OP.baselines if b.name == "numpy")
    label, ev = evaluate_baseline(OP, numpy, p, CPU, seed=1, policy=None)
    assert label == "numpy-blocked" and ev.ok, ev.reason


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("kw", PROBLEMS, ids=lambda kw: OP.problem(**kw).label)
def test_torch_sdpa_baselines_are_checked_correct_and_name_the_backend(kw):
    p = OP.problem(**kw)
    for b in OP.baselines:
        if not b.name.startswith("sdpa") or "cpu" not in b.backends:
            continue
        label, ev = evaluate_baseline(OP, b, p, CPU, seed=1, policy=None)
        assert ev.ok, (b.name, label, ev.reason)
        assert label.startswith("torch-sdpa (default ran " if b.name == "sdpa" else f"torch-{b.name} (ran ")
        assert "unknown" not in label and ("lse by logsumexp" in label) == p.lse, label
        if b.name != "sdpa":
            assert f"(ran {b.name.removeprefix('sdpa-')}" in label  # the pinned backend is the one that ran
