"""The FA3-style attention family (fa3, sm_90a) without a GPU: where it applies, its space (every rejection explained,
the picks valid, the rules' sentences), the order of the picks beside fa2 (prefill fa3 first, decode fa2's split-KV
first), the launch plan and its tensor maps (dims, strides, boxes as the host encodes them), the generated source,
and NVRTC cubins for sm_90a of every hand-picked configuration, which ptxas builds without spilling.
TRACEA_SLOW_TESTS=1 compiles bf16, every mask/lse variant and a sample of the space too."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest
from slow_tests import SLOW_TESTS, subset

from tracea_cli.backends import nvrtc
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.attention.families import wgmma_space as ws
from tracea_cli.ops.attention.families.wgmma import FA3, GEMM_ROLES, PARAMS, fa3_args, gemm_helpers_text
from tracea_cli.ops.registry import get_op
from tracea_cli.target import Target, limits_for

OP = get_op("attention")
BACKEND = OpBackend("attention", "cuda")
H200 = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a", limits=limits_for("sm_90a"))
H200_SMS = Target(backend="cuda", device_class="NVIDIA H200", arch="sm_90a",
                  limits=limits_for("sm_90a").__class__(**{**limits_for("sm_90a").__dict__, "sm_count": 132}))
A100 = Target(backend="cuda", device_class="NVIDIA A100", arch="sm_80", limits=limits_for("sm_80"))
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed (pip install 'tracea[cuda]')")
PREFILL = dict(batch=4, heads=16, seq=4096, dtype="bf16")


def test_the_register_a_mma_header_is_generated():
    from importlib.util import module_from_spec, spec_from_file_location

    here = Path(__file__).parent
    spec = spec_from_file_location("attention_mma_header", here / "attention_mma_header.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (here.parents[1] / "kernels" / "cuda" / "attention_wgmma_mma.cuh").read_text()
    assert module.generate() == committed


@pytest.mark.parametrize("fields", [dict(head_dim=128, causal=True), dict(head_dim=64, lse=True),
                                    dict(seq=100, seq_k=130, head_dim=64, kv_heads=4, causal=True),
                                    dict(seq=64, seq_k=64, head_dim=128)], ids=["d128", "d64", "short", "one-block"])
def test_every_rejection_is_explained_and_the_picks_are_valid(fields):
    p = OP.problem(**{**PREFILL, **fields})
    space = ws.fa3_space(p, H200)
    rejected = list(space.rejections())
    assert space.valid_configs() and len(space.valid_configs()) + len(rejected) == len(list(space.all_configs()))
    for config, reason in rejected:
        assert isinstance(reason, str) and len(reason) > 20, (config, reason)
    picks = FA3.suggested(p, H200)
    assert picks and all(BACKEND.why_invalid(p, H200, c) is None for c in picks)
    for c in space.valid_configs():
        assert ws.tiling(p, c).smem_bytes <= H200.limits.max_shared_per_block_optin


def test_the_rules_say_what_is_wrong():
    p = OP.problem(**PREFILL, head_dim=128)
    space = ws.fa3_space(p, H200)
    base = {"family": "fa3", "block_n": 128, "stages": 2, "consumers": 2}
    assert space.why_invalid(base) is None
    assert "bytes of shared memory (Q, 4 K and V tiles of 32768 bytes, barriers) exceed the device's 232448" in \
        space.why_invalid({**base, "stages": 4})
    short = OP.problem(batch=1, heads=2, seq=64, seq_k=100, head_dim=64, dtype="fp16")
    assert "block_m=128 (consumers=2) is larger than seq=64 needs (at most 64)" in \
        ws.fa3_space(short, H200).why_invalid(base)
    assert "a 3-stage ring needs 3 key blocks; seq_k=100 gives 2" in ws.fa3_space(short, H200).why_invalid(
        {**base, "block_n": 64, "stages": 3, "consumers": 1})
    assert "needs an sm_90 target (wgmma, built for sm_90a), not sm_80" in ws.fa3_space(p, A100).why_invalid(base)
    # overlapped, P's fragments live beside S and O: a 128-key block of D 128 with two consumers spills in ptxas
    # without ping-pong (measured), not with it (the compile tests below check both)
    assert "the overlapped schedule without ping-pong at block_n=128, head dim 128 and 2 consumers spills registers " \
        "in ptxas (measured); use pingpong=1, a smaller block_n or one consumer" in \
        space.why_invalid({**base, "overlap": 1})
    assert space.why_invalid({**base, "overlap": 1, "pingpong": 1}) is None
    assert space.why_invalid({**base, "overlap": 1, "consumers": 1}) is None
    assert space.why_invalid({**base, "overlap": 1, "block_n": 64}) is None
    # ping-pong takes two consumer warpgroups; it goes with either schedule and with causal masking
    assert "pingpong=1 orders the GEMMs of two consumer warpgroups taking turns; consumers=1 has no second one" in \
        space.why_invalid({**base, "pingpong": 1, "consumers": 1})
    assert space.why_invalid({**base, "pingpong": 1}) is None
    assert space.why_invalid({**base, "pingpong": 1, "overlap": 1, "block_n": 64}) is None
    causal = ws.fa3_space(OP.problem(**PREFILL, head_dim=128, causal=True), H200)
    assert causal.why_invalid({**base, "pingpong": 1}) is None


@pytest.mark.parametrize("fields, words", [
    (dict(dtype="fp32"), "runs fp16 and bf16, not fp32"),
    (dict(head_dim=256), "head dims 64, 128, not 256"),
    (dict(layout="blhd"), "reads the layout bhld only (each head's rows one TMA map), not blhd: fa2 serves it"),
    (dict(seq=1, seq_k=8192), "needs at least one 64-row query block; seq=1 is decode"),
])
def test_where_the_family_does_not_apply_it_says_why(fields, words):
    p = OP.problem(**{**PREFILL, "head_dim": 128, **fields})
    reason = FA3.space(p, H200)
    assert isinstance(reason, str) and words in reason
    assert FA3.suggested(p, H200) == [] or isinstance(FA3.space(p, H200), str)
    assert FA3.template(p) is None  # its sources stay out of the problem's cache key
    assert "needs an sm_90 target" in FA3.space(OP.problem(**PREFILL, head_dim=128), A100)


def test_prefill_tries_fa3_first_and_decode_keeps_fa2_split_kv_first():
    prefill = OP.problem(**PREFILL, head_dim=128, causal=True)
    picks = BACKEND.suggested(prefill, H200_SMS)
    assert picks[0] == {"family": "fa3", "block_n": 128, "stages": 3, "consumers": 2, "overlap": 1, "pingpong": 1}
    # a short tune tries the 128 x 128 tiles with ping-pong first, as measured on an H100 (2026-12-07): overlapped
    # with three ring slots (best at L 4096), then without the overlap (best at L 16384), then two ring slots
    fa3 = [(c["block_n"], c["stages"], c["consumers"], c["overlap"], c["pingpong"]) for c in picks
           if c["family"] == "fa3"]
    assert fa3[:3] == [(128, 3, 2, 1, 1), (128, 3, 2, 0, 1), (128, 2, 2, 0, 1)]
    assert {c["family"] for c in picks} == {"fa3", "fa2"}
    assert all(c["family"] == "fa2" for c in BACKEND.suggested(prefill, A100))
    decode = OP.problem(batch=1, heads=32, kv_heads=8, seq=1, seq_k=8192, head_dim=128, dtype="bf16")
    first = BACKEND.suggested(decode, H200_SMS)[0]
    assert first["family"] == "fa2" and first["kv_splits"] > 1


def test_the_launch_plan_and_its_tensor_maps():
    p = OP.problem(batch=3, heads=8, kv_heads=2, seq=1000, seq_k=4097, head_dim=128, dtype="fp16", causal=True,
                   lse=True)
    config = {"family": "fa3", "block_n": 64, "stages": 3, "consumers": 2}
    plan = FA3.launch(p, config)
    args = fa3_args(p, {t.name: np.zeros(t.shape, np.float16) for t in p.tensors()})
    (step,) = plan.steps
    assert plan.grid(step, args) == (8, 24, 1) and step.block == (384, 1, 1) and plan.arch == "sm_90a"
    assert step.dynamic_smem_bytes == 1024 + 128 * 128 * 2 + 2 * 3 * 64 * 128 * 2 + 8 * (1 + 3 * 3)
    assert plan.params == PARAMS and PARAMS[:3] == ("map_q", "map_k", "map_v") and args["lse"] is not None
    q, k, v = (plan.tensor_maps[n] for n in ("map_q", "map_k", "map_v"))
    assert (q.tensor, k.tensor, v.tensor) == ("q", "k", "v")
    assert {m.kind for m in (q, k, v)} == {"tiled3d"} and {m.swizzle for m in (q, k, v)} == {"128B"}
    # what the host encodes (backends/cuda.encode_map): sizes innermost first, outer strides in bytes, the box
    sizes = lambda m: [args[n] for n in m.dims]  # noqa: E731
    strides = lambda m: [args[n] * m.elem_bytes for n in m.strides]  # noqa: E731
    assert sizes(q) == [128, 1000, 24] and strides(q) == [256, 1000 * 256] and q.box == (64, 128, 1)
    for m in (k, v):
        assert sizes(m) == [128, 4097, 6] and strides(m) == [256, 4097 * 256] and m.box == (64, 64, 1)
    # the head axis is one stride: batch b, head h is row block b·H + h (the layout bhld's batch stride is H heads)
    assert args["q_sb"] == p.heads * args["q_sh"] and args["kv_sb"] == p.kv_heads * args["kv_sh"]


def test_the_source_names_its_configuration_and_asserts_the_plan():
    p = OP.problem(**PREFILL, head_dim=64, lse=True)
    config = {"family": "fa3", "block_n": 128, "stages": 3, "consumers": 2}
    source = FA3.source(p, config)
    t = ws.tiling(p, config)
    assert "using Tile = tracea::Fa3<64, 128, 3, 2, false, false, true>;" in source
    assert "tracea::Fa3<64, 128, 3, 2, true, false, true>;" in FA3.source(p, {**config, "overlap": 1})
    assert f"Tile::SMEM_BYTES == {t.smem_bytes}" in source and "#define WG_TILE_M 128" in source
    assert "#define WG_DTYPE 1" in source and 'extern "C" __global__' in source and "attention_fa3(" in source
    # the GEMM's roles and entry are left out: its producer, consumer and split-K adds are not in any fa3 source
    assert "gemm_wgmma(" not in source and GEMM_ROLES not in source and "add_partial" not in source
    assert gemm_helpers_text().endswith("}  // namespace wg\n")
    assert '#include "' not in source  # self-contained


# sha256 of the generated source of configurations without ping-pong, as main generated them before the pingpong
# parameter existed (81de237): their kernels, and so the measurements made with them, stay what they were. Updated
# once since, on 2026-12-07, when the GEMM helpers the attention unit includes gained split-K (the pipeline's K range
# per work item): every fa3 source, and so every fa3 cache key, changed then (old entries warm-start); and once more
# the same day, when the attention unit stopped taking the GEMM's roles (GEMM_ROLES), so that a change there no longer
# reaches fa3
UNCHANGED_SOURCES = [
    (dict(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16"),
     dict(block_n=128, stages=3, consumers=2, overlap=0),
     "493e6e7a0779fe0bbc896568f5561c8a6967cb3cb431bc10a89a836f8377df5c"),
    (dict(batch=4, heads=16, seq=4096, head_dim=128, dtype="bf16", causal=True),
     dict(block_n=128, stages=2, consumers=2, overlap=0),
     "63fb5572d64df632fa7441da49a94f809e188c5c7f4421d8938c957db0640c20"),
    (dict(batch=4, heads=32, seq=1024, head_dim=64, dtype="fp16", lse=True),
     dict(block_n=64, stages=4, consumers=2, overlap=1),
     "d39797b77d43fbea5bfd0a1a396c923608134cca310d79f3be1ae909ef91ef86"),
    (dict(batch=2, heads=8, kv_heads=2, seq=1000, head_dim=128, dtype="fp16", causal=True, lse=True),
     dict(block_n=64, stages=2, consumers=1, overlap=0),
     "9b9e6d7021e10a9c6bfaac0a4fb73afe5352a43a72610e5c75ecf8bbd37542c1"),
]


@pytest.mark.parametrize("fields, config, sha", UNCHANGED_SOURCES, ids=["d128", "d128-causal", "d64-ov", "d128-c1"])
def test_without_pingpong_the_source_is_byte_for_byte_what_it_was(fields, config, sha):
    p = OP.problem(**fields)
    for c in ({"family": "fa3", **config}, {"family": "fa3", **config, "pingpong": 0}):
        source = FA3.source(p, c)
        assert hashlib.sha256(source.encode()).hexdigest() == sha, c
        assert "Fa3Pingpong" not in source and "turn_sync" not in source
    if config["consumers"] == 2:  # the ping-pong version is another kernel
        assert hashlib.sha256(FA3.source(p, {"family": "fa3", **config, "pingpong": 1}).encode()).hexdigest() != sha


def test_the_pingpong_source_specialises_the_consumers_loop():
    p = OP.problem(**PREFILL, head_dim=128, causal=True)
    config = {"family": "fa3", "block_n": 128, "stages": 3, "consumers": 2, "overlap": 0, "pingpong": 1}
    source = FA3.source(p, config)
    assert "using Tile = tracea::Fa3Pingpong<tracea::Fa3<128, 128, 3, 2, false, true, false>>;" in source
    assert "void fa3_consume<Tile>(" in source and "fa3_consume_pingpong<Tile>(ring, b, args, consumer);" in source
    assert '"pingpong":1' in source.splitlines()[1]
    assert source.count("struct Fa3Consumer") == 1 and '#include "' not in source  # attention_wgmma.cuh pasted once
    # the family's template text (the cache key) covers both schedules' code
    assert "fa3_consume_pingpong" in FA3.template(p) and "fa3_forward" in FA3.template(p)
    assert ws.describe(config) == "fa3 128x128 s3 c2 pp"


def test_a_kernel_serves_its_own_head_dim_only():
    p = OP.problem(**PREFILL, head_dim=64)
    config = {"family": "fa3", "block_n": 128, "stages": 2, "consumers": 2}
    assert FA3.serves(p, config, OP.problem(batch=1, heads=3, seq=999, head_dim=64)) is None
    assert "built for head dim 64, not 128" in FA3.serves(p, config, OP.problem(**PREFILL, head_dim=128))


def _report(p, config):
    """The main kernel's ptxas figures; ptxas neither serialised the wgmmas nor ignored setmaxnreg."""
    from tracea_cli.backends.cuda import IGNORED_SETMAXNREG, SERIALIZED_WGMMA

    artifact = BACKEND.compile(p, config, H200)
    r = artifact.resources["kernels"][artifact.plan.main_kernel.name]
    assert artifact.resources["ptx_target"] == "sm_90a", artifact.resources
    log = artifact.resources["log"]
    assert SERIALIZED_WGMMA not in log and IGNORED_SETMAXNREG not in log, (p.label, config, log)
    return r


@needs_nvrtc
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_hand_picked_configurations_compile_without_spills(head_dim):
    """fp16, causal with lse: the variant with the most registers (the mask and the lse store)."""
    p = OP.problem(**{**PREFILL, "dtype": "fp16"}, head_dim=head_dim, causal=True, lse=True)
    picks = ws.hand_picked(p, H200)
    assert len(picks) >= 4 and any(ws.pingpong_of(c) for c in picks)
    for config in picks:
        r = _report(p, config)
        assert r["registers"] <= 255 and r["spill_store_bytes"] == r["spill_load_bytes"] == r["stack_bytes"] == 0, (
            p.label, config, r)


@needs_nvrtc
def test_the_measured_register_exception_still_holds():
    """wgmma_space.SPILLS_WITHOUT_PINGPONG: the overlapped 128 x 128 tile of D 128 with two consumers spills without
    ping-pong and fits with it (ptxas allocates the consumers' code under setmaxnreg 232: more than the 168 it
    reports at entry). Compiled bypassing the space's rules; when a new ptxas changes either, the rule must follow."""
    from tracea_cli.ops.attention.families.wgmma import fa3_source

    p = OP.problem(**PREFILL, head_dim=128)
    config = {"family": "fa3", "block_n": 128, "stages": 2, "consumers": 2, "overlap": 1}
    spilled = {}
    for pingpong in (0, 1):
        program = nvrtc.compile_source(fa3_source(p, {**config, "pingpong": pingpong}),
                                       nvrtc.CompileOptions(arch="sm_90a"), want_ptx=False)
        spilled[pingpong] = program.resources["attention_fa3"].spill_store_bytes
    assert spilled[0] > 0 and spilled[1] == 0, spilled


# Every dtype x head dim x mask x lse; without TRACEA_SLOW_TESTS=1, the two with the fewest registers in common with
# the test above (bf16 without a mask; fp16 D 128 without lse)
VARIANTS = list(itertools.product(("fp16", "bf16"), (64, 128), (False, True), (False, True)))


@needs_nvrtc
@pytest.mark.parametrize("dtype, head_dim, causal, lse", subset(VARIANTS, quick=(8, 6)))
def test_every_variant_and_a_sample_of_the_space_compile_without_spills(dtype, head_dim, causal, lse):
    p = OP.problem(**{**PREFILL, "dtype": dtype}, head_dim=head_dim, causal=causal, lse=lse)
    valid = ws.fa3_space(p, H200).valid_configs()
    sample = ws.hand_picked(p, H200)[:1] + valid[:: max(1, len(valid) // (4 if SLOW_TESTS else 1))][:4 if SLOW_TESTS
                                                                                                 else 1]
    for config in sample:
        r = _report(p, config)
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == 0, (p.label, config, r)


@needs_nvrtc
@pytest.mark.parametrize("dtype, head_dim, causal, lse", subset(VARIANTS, quick=(1, 15)))
def test_a_sample_of_the_pingpong_space_compiles_without_spills(dtype, head_dim, causal, lse):
    """Ping-pong configurations beyond the hand-picks (both schedules, every ring depth the sample reaches)."""
    p = OP.problem(**{**PREFILL, "dtype": dtype}, head_dim=head_dim, causal=causal, lse=lse)
    valid = [c for c in ws.fa3_space(p, H200).valid_configs() if c["pingpong"]]
    assert {c["overlap"] for c in valid} == {0, 1} and all(c["consumers"] == 2 for c in valid)
    sample = valid[:: max(1, len(valid) // (len(valid) if SLOW_TESTS else 3))]
    for config in sample:
        r = _report(p, config)
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == r["stack_bytes"] == 0, (p.label, config, r)


def test_the_gpu_test_checks_valid_configurations_within_its_time_budget():
    """tests/engine_hopper/test_attention_wgmma_gpu.py: every configuration it checks is in the space, both schedules
    and both consumer counts are among them, ping-pong with either schedule too, and there are few enough for a minute
    or two on an H200."""
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("attention_wgmma_gpu_cases", Path(__file__).parent / "test_attention_wgmma_gpu.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    checked = []
    for fields in module.SHAPES:
        p = OP.problem(**{"batch": 2, "heads": 4, **fields})
        configs = module.configs_for(p, H200)
        assert configs and all(ws.fa3_space(p, H200).why_invalid(c) is None for c in configs), p.label
        if any(c["consumers"] == 2 for c in configs):  # the ping-pong picks, both schedules, causal shapes included
            assert {c["overlap"] for c in configs if c["pingpong"]} == {0, 1}, p.label
        checked += configs
    assert {(c["consumers"], c.get("overlap", 0), c.get("pingpong", 0)) for c in checked} >= \
        {(1, 0, 0), (1, 1, 0), (2, 0, 0), (2, 1, 0), (2, 0, 1), (2, 1, 1)}
    assert len(checked) <= 110
