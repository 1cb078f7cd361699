"""The FA2-style attention family without a GPU: its space (every rejection explained, the picks valid, the rules'
sentences), where it applies, the launch plan and arguments for both layouts, and NVRTC cubins for sm_80 and sm_90a
of every dtype x head dim x the configurations tune tries first, which ptxas builds without spilling.
TRACEA_SLOW_TESTS=1 compiles bf16 too, and every pick of every GPU suite row."""

from __future__ import annotations

import os

import pytest

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.attention.families.fa2 import FA2, fa2_args
from tracea_cli.ops.attention.families.fa2_space import fa2_space, tiling
from tracea_cli.ops.registry import get_op

OP = get_op("attention")
BACKEND = OpBackend("attention", "cuda")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[cuda]')")


@pytest.mark.parametrize("fields", [dict(seq=4096, head_dim=128, causal=True), dict(seq=1, seq_k=8192, head_dim=64),
                                    dict(seq=17, head_dim=256, kv_heads=4, lse=True)], ids=["d128", "decode", "d256"])
def test_every_rejection_is_explained_and_the_picks_are_valid(fields, sm80, sm90):
    p = OP.problem(**{"batch": 4, "heads": 16, "dtype": "bf16", **fields})
    for target in (sm80, sm90):
        space = fa2_space(p, target)
        rejected = list(space.rejections())
        assert space.valid_configs() and len(space.valid_configs()) + len(rejected) == len(list(space.all_configs()))
        for config, reason in rejected:
            assert isinstance(reason, str) and len(reason) > 20, (config, reason)
        picks = BACKEND.suggested(p, target)
        assert picks and all(BACKEND.why_invalid(p, target, c) is None for c in picks)
        for c in space.valid_configs():
            assert tiling(p, c).smem_bytes <= target.limits.max_shared_per_block_optin


def test_the_rules_say_what_is_wrong(sm80, sm90, make_target):
    p = OP.problem(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16")
    space = fa2_space(p, sm90)
    base = {"family": "fa2", "block_m": 128, "block_n": 64, "warps": 8, "stages": 2}
    assert space.why_invalid(base) is None
    assert "does not give each of 4 warps whole 16-row tiles" in space.why_invalid({**base, "block_m": 32, "warps": 4})
    assert "registers per thread exceed" in space.why_invalid({**base, "warps": 4})  # 32 rows x D 128 per warp
    assert "bytes of shared memory exceed" in fa2_space(p, sm80).why_invalid({**base, "block_n": 128, "stages": 3})
    wide = OP.problem(batch=1, heads=1, seq=4096, head_dim=256, dtype="bf16")
    assert "about 256 registers per thread exceed the 255" in fa2_space(wide, sm90).why_invalid(
        {**base, "block_m": 64, "block_n": 32, "warps": 4})
    short = OP.problem(batch=1, heads=1, seq=17, head_dim=64, dtype="fp16")
    assert "block_m=128 is larger than seq=17 needs (at most 32)" in fa2_space(short, sm90).why_invalid(base)
    assert "a 3-stage pipeline needs 3 key blocks; seq_k=17 gives 1" in fa2_space(short, sm90).why_invalid(
        {**base, "block_m": 32, "block_n": 32, "warps": 2, "stages": 3})
    assert "compute capability 8.0 or newer, sm_75 has 7.5" in fa2_space(p, make_target("sm_75")).why_invalid(base)


def test_where_the_family_applies(sm90):
    assert "runs fp16 and bf16, not fp32" in FA2.space(OP.problem(heads=2, seq=64, head_dim=64, dtype="fp32"), sm90)
    assert FA2.template(OP.problem(heads=2, seq=64, head_dim=64, dtype="fp64")) is None
    spaces = {fam.name for fam, _ in BACKEND.spaces(OP.problem(heads=2, seq=64, head_dim=64, dtype="bf16"), sm90)}
    assert spaces == {"fa2"}
    assert OP.dtypes["cuda"] == ("fp16", "bf16")


def test_a_kernel_serves_its_own_head_dim_only():
    p64 = OP.problem(heads=2, seq=64, head_dim=64)
    config = {"family": "fa2", "block_m": 64, "block_n": 64, "warps": 4, "stages": 2}
    assert FA2.serves(p64, config, OP.problem(heads=8, seq=999, head_dim=64)) is None
    assert "built for head dim 64, not 128" in FA2.serves(p64, config, OP.problem(heads=2, seq=64, head_dim=128))


@pytest.mark.parametrize("layout", ["bhld", "blhd"])
def test_the_launch_and_the_arguments_follow_the_layout(layout):
    import numpy as np

    p = OP.problem(batch=3, heads=8, kv_heads=2, seq=100, seq_k=300, head_dim=64, layout=layout, causal=True)
    config = {"family": "fa2", "block_m": 64, "block_n": 64, "warps": 4, "stages": 2}
    plan = FA2.launch(p, config)
    operands = {t.name: np.zeros(t.shape, np.float16) for t in p.tensors()}
    args = fa2_args(p, operands)
    (step,) = plan.steps
    assert plan.grid(step, args) == (2, 24, 1) and step.block == (128, 1, 1)
    assert step.dynamic_smem_bytes == (64 + 2 * 2 * 64) * 72 * 2
    assert args["lse"] is None and args["heads"] == 8 and args["kv_heads"] == 2
    if layout == "bhld":
        assert (args["q_sb"], args["q_sh"], args["q_sr"]) == (8 * 100 * 64, 100 * 64, 64)
        assert (args["kv_sb"], args["kv_sh"], args["kv_sr"]) == (2 * 300 * 64, 300 * 64, 64)
    else:
        assert (args["q_sb"], args["q_sh"], args["q_sr"]) == (100 * 8 * 64, 64, 8 * 64)
        assert (args["kv_sb"], args["kv_sh"], args["kv_sr"]) == (300 * 2 * 64, 64, 2 * 64)


def _compile(p, config, arch, make_target):
    artifact = BACKEND.compile(p, config, make_target(arch))
    (r,) = artifact.resources["kernels"].values()
    assert artifact.resources["ptx_target"] == arch and r["registers"] <= 255
    return r


SLOW = pytest.mark.skipif(not os.environ.get("TRACEA_SLOW_TESTS"), reason="opt in: TRACEA_SLOW_TESTS=1 (minutes)")


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["fp16", pytest.param("bf16", marks=SLOW)])  # the same registers (bf16 mma)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_first_picks_compile_without_spills(head_dim, dtype, arch, make_target):
    p = OP.problem(batch=4, heads=16, seq=4096, head_dim=head_dim, dtype=dtype, causal=head_dim != 128,
                   lse=head_dim == 64)
    for config in BACKEND.suggested(p, make_target(arch))[:1 if head_dim == 128 else 2]:
        r = _compile(p, config, arch, make_target)
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == 0, (p.label, arch, config, r)


@needs_nvrtc
@SLOW
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_suites_picks_compile(arch, make_target):
    for p in OP.suite("default", "cuda", ("fp16", "bf16")):
        for config in BACKEND.suggested(p, make_target(arch)):
            _compile(p, config, arch, make_target)


@pytest.mark.parametrize("seq", [1, 2, 17, 33, 1000])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_every_sequence_length_has_first_picks(seq, head_dim, sm90):
    """Short sequences reject every larger block: the picks shrink to the blocks they need instead of vanishing
    (the H200 run found none for L = 1 and 17 at head dims 64 and 128)."""
    for causal in (False, True):
        p = OP.problem(batch=2, heads=4, seq=seq, head_dim=head_dim, dtype="bf16", causal=causal)
        picks = FA2.suggested(p, sm90)
        assert picks and all(fa2_space(p, sm90).why_invalid(c) is None for c in picks), (seq, head_dim, causal)
