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
from tracea_cli.ops.attention.families.fa2_space import KV_SPLITS, fa2_space, grid_blocks, tiling
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


def test_where_the_family_applies(sm90, sm80):
    assert "runs fp16 and bf16, not fp32" in FA2.space(OP.problem(heads=2, seq=64, head_dim=64, dtype="fp32"), sm90)
    assert FA2.template(OP.problem(heads=2, seq=64, head_dim=64, dtype="fp64")) is None
    p = OP.problem(heads=2, seq=64, head_dim=64, dtype="bf16")
    assert {fam.name for fam, _ in BACKEND.spaces(p, sm80)} == {"fa2"}
    assert {fam.name for fam, _ in BACKEND.spaces(p, sm90)} == {"fa2", "fa3"}  # fa3: sm_90, tests/engine_hopper
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
    """The ptxas report of the plan's main kernel (a split-KV plan's combine is checked by _compile_split)."""
    artifact = BACKEND.compile(p, config, make_target(arch))
    r = artifact.resources["kernels"][artifact.plan.main_kernel.name]
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


# ---- split-KV (kv_splits > 1) ----------------------------------------------------------------------------------------

DECODE = dict(batch=1, heads=32, kv_heads=8, head_dim=128, dtype="bf16")


def test_split_kv_rules_say_what_is_wrong(sm90):
    p = OP.problem(seq=1, seq_k=100, **DECODE)
    base = {"family": "fa2", "block_m": 16, "block_n": 32, "warps": 1, "stages": 2, "kv_splits": 4}
    assert fa2_space(p, sm90).why_invalid(base) is None
    assert "kv_splits=8 is more chunks than the 4 key blocks of block_n=32 over seq_k=100" in \
        fa2_space(p, sm90).why_invalid({**base, "kv_splits": 8})
    prefill = OP.problem(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16")
    reason = fa2_space(prefill, sm90).why_invalid({**base, "block_m": 128, "block_n": 64, "warps": 8})
    assert "16384 (batch·head, 16-row query block) pairs" in reason and "up to 1024" in reason


def test_kv_splits_1_is_the_kernel_as_before_and_prefill_keys_keep_their_hash():
    """A configuration stored before kv_splits existed means kv_splits = 1 and builds the same text; the sources hashed
    into a problem's cache key gain the split header only where the problem's space has split-KV."""
    p = OP.problem(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16", causal=True)
    old = {"family": "fa2", "block_m": 128, "block_n": 64, "warps": 8, "stages": 2}
    assert FA2.source(p, old) == FA2.source(p, {**old, "kv_splits": 1})
    assert "attention_fa2_split" not in FA2.source(p, old) and FA2.launch(p, old) == FA2.launch(p, {**old,
                                                                                                   "kv_splits": 1})
    assert "fa2_split_forward" not in FA2.template(p)  # prefill: the key hashes what it hashed before split-KV
    decode = OP.problem(seq=1, seq_k=8192, **DECODE)
    assert "fa2_split_forward" in FA2.template(decode)
    assert BACKEND.source_hash(decode) != BACKEND.source_hash(OP.problem(seq=4096, **DECODE))


def test_the_split_launch_plan_declares_its_workspace():
    import numpy as np

    p = OP.problem(seq=3, seq_k=1000, causal=True, lse=True, **{**DECODE, "batch": 2})
    config = {"family": "fa2", "block_m": 16, "block_n": 64, "warps": 1, "stages": 2, "kv_splits": 8}
    plan = FA2.launch(p, config)
    args = fa2_args(p, {t.name: np.zeros(t.shape, np.float16) for t in p.tensors()})
    split, combine = plan.steps
    assert (split.name, combine.name) == ("attention_fa2_split", "attention_fa2_combine")
    assert plan.grid(split, args) == (1, 64, 8) and plan.grid(combine, args) == (1, 64, 1) and combine.block[0] == 128
    assert plan.params[-1] == "workspace" and len(plan.params) <= 16  # the exported runtime's TRACEA_MAX_PARAMS
    assert plan.workspace_bytes(args) == 8 * (128 + 1) * 4 * 3 * 64  # O and lse of 8 chunks per row, fp32
    source = FA2.source(p, config)
    assert "fa2_split_forward<Tile, 8>" in source and "fa2_split_combine<Tile, 8>" in source


@pytest.mark.parametrize("seq", [1, 4, 16])
@pytest.mark.parametrize("seq_k", [1024, 8192, 32768])
@pytest.mark.parametrize("batch", [1, 8])
def test_decode_picks_split_the_keys_to_fill_the_sms(seq, seq_k, batch, sm90, sm80):
    for target, sms in ((sm90, 132), (sm80, 108)):
        p = OP.problem(seq=seq, seq_k=seq_k, **{**DECODE, "batch": batch})
        picks = FA2.suggested(p, target)
        first = picks[0]
        assert first["kv_splits"] > 1 and fa2_space(p, target).why_invalid(first) is None, (p.label, first)
        blocks = grid_blocks(p, first)  # packed GQA: batch x kv_heads x the query blocks of 4 heads' rows
        key_blocks = -(-seq_k // first["block_n"])
        # enough blocks for 4 per SM, or as many chunks as leave each 4 key blocks, or the most chunks there are
        assert blocks * first["kv_splits"] >= 4 * sms or key_blocks // (2 * first["kv_splits"]) < 4 or \
            first["kv_splits"] == max(KV_SPLITS), (p.label, first)


def test_prefill_and_unknown_sm_counts_are_not_split(sm90, make_target):
    prefill = OP.problem(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16")
    assert all(c["kv_splits"] == 1 for c in FA2.suggested(prefill, sm90))
    decode = OP.problem(seq=1, seq_k=8192, **DECODE)
    assert all(c["kv_splits"] == 1 for c in FA2.suggested(decode, make_target("sm_90")))  # no SM count: no guess


def _compile_split(p, config, arch, make_target):
    artifact = BACKEND.compile(p, config, make_target(arch))
    kernels = artifact.resources["kernels"]
    assert set(kernels) == {"attention_fa2_split", "attention_fa2_combine"}
    for r in kernels.values():
        assert r["registers"] <= 255 and r["spill_store_bytes"] == r["spill_load_bytes"] == 0, (p.label, config, r)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_split_picks_compile_without_spills(head_dim, arch, make_target, sm90):
    """The first packed (pack_gqa = 1) and the first unpacked split pick of GQA decode."""
    p = OP.problem(seq=1, seq_k=8192, causal=head_dim == 64, lse=head_dim == 256, **{**DECODE, "head_dim": head_dim})
    picks = FA2.suggested(p, sm90)
    for pack in (1, 0):
        config = next(c for c in picks if c["pack_gqa"] == pack)
        assert config["kv_splits"] > 1
        _compile_split(p, config, arch, make_target)


# ---- packed GQA (pack_gqa = 1) ---------------------------------------------------------------------------------------


def test_pack_gqa_rules_say_what_is_wrong(sm90):
    p = OP.problem(seq=1, seq_k=1000, **DECODE)
    packed = {"family": "fa2", "block_m": 16, "block_n": 32, "warps": 1, "stages": 2, "kv_splits": 4, "pack_gqa": 1}
    space = fa2_space(p, sm90)
    assert space.why_invalid(packed) is None
    assert "it needs kv_splits > 1" in space.why_invalid({**packed, "kv_splits": 1})
    assert "block_m=32 is larger than heads/kv_heads x seq=4 needs (at most 16)" in space.why_invalid(
        {**packed, "block_m": 32, "warps": 2})
    mha = OP.problem(seq=1, seq_k=1000, **{**DECODE, "kv_heads": 32})
    assert "heads=32 has as many K/V heads" in fa2_space(mha, sm90).why_invalid(packed)
    threes = OP.problem(seq=1, seq_k=1000, **{**DECODE, "heads": 12, "kv_heads": 4})
    assert "block_m a multiple of the 3 query heads per K/V head; block_m=16 is not" in \
        fa2_space(threes, sm90).why_invalid(packed)
    # 8 heads x 4 rows: 32 packed rows fill a 32-row block that the 4 rows alone could not
    rows = OP.problem(seq=4, seq_k=1000, **{**DECODE, "kv_heads": 4})
    wide = {**packed, "block_m": 32, "warps": 2}
    assert fa2_space(rows, sm90).why_invalid(wide) is None
    assert "block_m=32 is larger than seq=4" in fa2_space(rows, sm90).why_invalid({**wide, "pack_gqa": 0})


def test_the_packed_launch_covers_the_groups_rows_and_the_combine_is_unchanged():
    import numpy as np

    p = OP.problem(seq=5, seq_k=1000, causal=True, lse=True, **{**DECODE, "batch": 2})
    config = {"family": "fa2", "block_m": 16, "block_n": 64, "warps": 1, "stages": 2, "kv_splits": 8, "pack_gqa": 1}
    plan = FA2.launch(p, config)
    args = fa2_args(p, {t.name: np.zeros(t.shape, np.float16) for t in p.tensors()})
    split, combine = plan.steps
    # ceil(4 heads x 5 rows / 16) query blocks, batch x kv_heads; the combine over batch x heads as unpacked
    assert plan.grid(split, args) == (2, 16, 8) and plan.grid(combine, args) == (2, 64, 1)
    unpacked = FA2.launch(p, {**config, "pack_gqa": 0})
    assert unpacked.steps[1] == combine and unpacked.workspace_bytes(args) == plan.workspace_bytes(args)
    source = FA2.source(p, config)
    assert "fa2_split_forward<Tile, 8, true>" in source and '"pack_gqa":1' in source
    assert "fa2_split_combine<Tile, 8>" in source


def test_pack_gqa_0_is_the_source_as_before_and_a_packed_kernel_serves_its_own_group():
    p = OP.problem(seq=1, seq_k=8192, **DECODE)
    split = {"family": "fa2", "block_m": 16, "block_n": 64, "warps": 1, "stages": 2, "kv_splits": 8}
    assert FA2.source(p, split) == FA2.source(p, {**split, "pack_gqa": 0})
    plain = {**split, "kv_splits": 1}
    assert FA2.source(p, plain) == FA2.source(p, {**plain, "pack_gqa": 0})
    packed = {**split, "pack_gqa": 1}
    assert FA2.serves(p, packed, OP.problem(seq=7, seq_k=100, **{**DECODE, "batch": 3})) is None
    assert "built for 4 query heads per K/V head, not 2" in FA2.serves(
        p, packed, OP.problem(seq=1, seq_k=8192, **{**DECODE, "kv_heads": 16}))
    assert FA2.serves(p, split, OP.problem(seq=1, seq_k=8192, **{**DECODE, "kv_heads": 16})) is None


@pytest.mark.parametrize("heads, kv_heads", [(32, 8), (32, 4), (32, 32)])
def test_gqa_decode_picks_pack_first_and_keep_an_unpacked_one(heads, kv_heads, sm90, sm80):
    for target in (sm90, sm80):
        p = OP.problem(seq=1, seq_k=8192, **{**DECODE, "heads": heads, "kv_heads": kv_heads})
        picks = FA2.suggested(p, target)  # the tuner's first three
        packs = [c["pack_gqa"] for c in picks]
        assert packs == ([1, 1, 0] if kv_heads < heads else [0, 0, 0]), (p.label, picks)
        assert all(c["kv_splits"] > 1 and fa2_space(p, target).why_invalid(c) is None for c in picks)
