"""The numba attention kernel (online softmax over key blocks): correct against the float64 reference on lengths no
block divides (L ∈ {1, 17, ...}), causal self and cross attention, grouped-query heads, both layouts, lse, every head
dim, fp32 and fp64; the check catches a wrong kernel; the real check-then-time path; and the search space's rules,
each rejection explained.

One module per dtype compiles once per process (seconds); block sizes, layout, mask and lse are run-time arguments,
so the cases vary them freely. The CLI test loads the fp32 module from the session's kernel cache.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea_cli.backends.checked import check_outputs, poison, upload
from tracea_cli.backends.cpu import call, compiled_entry, kernel_cache_dir
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.attention.families.numba import NUMBA
from tracea_cli.ops.attention.families.numba_space import attention_space, hand_picked
from tracea_cli.ops.attention.problem import AttentionProblem, make_inputs, reference
from tracea_cli.ops.registry import get_op
from tracea_cli.target import Target

numba = pytest.importorskip("numba")
OP = get_op("attention")
THREADS = min(2, numba.config.NUMBA_NUM_THREADS)
CPU = Target(backend="cpu", device_class="test cpu | 2 threads", threads=2)


def run_attention(problem: AttentionProblem, config: dict, inputs: dict) -> dict:
    """The outputs (storage format) for `inputs` from the kernel the CPU runtime would run, NaN-poisoned first."""
    (step,) = NUMBA.launch(problem, config).steps
    step = dataclasses.replace(step, threads=int(config["threads"]))
    entry = compiled_entry(NUMBA.source(problem, config), step, kernel_cache_dir())
    operands = upload(np, OP.tensors(problem), inputs, problem.dtype)
    outputs = [t for t in OP.tensors(problem) if t.output]
    for t in outputs:
        poison(operands[t.name], t.dtype or problem.dtype)
    call(entry, step, NUMBA.args(problem, operands))
    return {t.name: operands[t.name] for t in outputs}


def checked(problem: AttentionProblem, outputs: dict, inputs: dict) -> tuple[bool, float, str]:
    dtypes = {t.name: t.dtype for t in problem.tensors() if t.dtype}
    return check_outputs(outputs, reference(problem, inputs), problem.dtype, dtypes)


# (batch, heads, kv_heads, seq, seq_k, head_dim, causal, layout, lse)
SHAPES = [(1, 1, 1, 1, 1, 64, True, "bhld", True), (2, 4, 2, 17, 17, 64, True, "blhd", True),
          (1, 4, 1, 17, 70, 128, True, "bhld", False), (1, 2, 2, 40, 9, 64, False, "blhd", True),
          (1, 2, 1, 1, 100, 256, True, "blhd", True), (2, 3, 3, 33, 33, 128, False, "bhld", False)]
RUN_TIME = [{"bm": 4, "bn": 16, "threads": THREADS}, {"bm": 16, "bn": 32, "threads": 1},
            {"bm": 8, "bn": 64, "threads": THREADS}]
CASES = [(dtype, i, shape) for dtype in ("fp32", "fp64") for i, shape in enumerate(SHAPES)]


@pytest.mark.parametrize("dtype, i, shape", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_kernels_match_the_reference(dtype, i, shape):
    b, h, hkv, lq, lk, d, causal, layout, lse = shape
    p = AttentionProblem(b, h, lq, d, hkv, lk, dtype, causal=causal, layout=layout, lse=lse)
    config = RUN_TIME[(i + (dtype == "fp64")) % len(RUN_TIME)]
    inputs = make_inputs(p, np.random.default_rng(i))
    ok, err, why = checked(p, run_attention(p, config, inputs), inputs)
    assert ok, (p.label, config, why)


def test_a_wrong_kernel_would_be_caught():
    """The check fails when the kernel's result belongs to another problem: no mask, or the other layout's reading."""
    p = AttentionProblem(1, 2, 17, 64, 1, 17, "fp32", causal=True, lse=True)
    inputs = make_inputs(p, np.random.default_rng(0))
    assert checked(p, run_attention(p, RUN_TIME[0], inputs), inputs)[0]
    unmasked = dataclasses.replace(p, causal=False)
    ok, _, why = checked(p, run_attention(unmasked, RUN_TIME[0], inputs), inputs)
    assert not ok and "relative error" in why
    swapped = AttentionProblem(1, 17, 2, 64, 17, 1, "fp32", layout="blhd")  # the same memory read as blhd
    outs = run_attention(swapped, RUN_TIME[0], inputs)
    assert not checked(p, {"out": outs["out"], "lse": np.zeros((1, 2, 17), np.float32)}, inputs)[0]


def test_the_real_path_checks_then_times_a_suggested_configuration():
    p = OP.problem(batch=1, heads=4, kv_heads=2, seq=33, seq_k=40, head_dim=64, dtype="fp32", causal=True, lse=True)
    backend = OpBackend("attention", "cpu")
    config = backend.suggested(p, CPU)[0]
    artifact = backend.compile(p, config, CPU)
    from tracea_cli.timing import TimingPolicy

    policy = TimingPolicy(warmup=1, min_samples=2, max_samples=3)
    ev = backend.evaluate(artifact, p, CPU, policy=policy, seed=3)
    assert ev.ok and ev.rel_error <= 1e-5 and ev.samples.n >= 2
    label, base = backend.baseline(p, CPU, policy=policy, seed=3, name="numpy")
    assert base.ok and label == "numpy-blocked"


# ---- the space ----------------------------------------------------------------------------------------------------

SPACE_PROBLEMS = [dict(heads=4, seq=256, head_dim=64), dict(batch=4, heads=16, seq=4096, head_dim=128),
                  dict(heads=2, seq=1, seq_k=9000, head_dim=256, dtype="fp64"), dict(heads=1, seq=5, head_dim=64)]


@pytest.mark.parametrize("shape", SPACE_PROBLEMS, ids=lambda s: f"{s['heads']}-{s['seq']}-{s['head_dim']}")
def test_every_rejection_is_explained_and_the_picks_are_valid(shape):
    p = OP.problem(**{"dtype": "fp32", **shape})
    space = attention_space(p, CPU)
    valid = space.valid_configs()
    rejected = list(space.rejections())
    assert valid and len(valid) + len(rejected) == len(list(space.all_configs()))
    for config, reason in rejected:
        assert isinstance(reason, str) and len(reason) > 20 and any(str(v) in reason for v in config.values()), \
            (config, reason)
    picks = hand_picked(p, CPU)
    assert picks and all(space.why_invalid(c) is None for c in picks)
    assert NUMBA.suggested(p, CPU) == picks[:2]


def test_the_rules_say_what_is_wrong():
    small = attention_space(OP.problem(heads=1, seq=20, seq_k=40, head_dim=64, dtype="fp64"), CPU)
    assert small.why_invalid({"bm": 8, "bn": 32, "threads": 2}) is None
    assert "bm=64 is larger than seq=20 needs; bm=32 already covers it" in \
        small.why_invalid({"bm": 64, "bn": 32, "threads": 1})
    assert "bn=128 is larger than seq_k=40 needs; bn=64 already covers it" in \
        small.why_invalid({"bm": 8, "bn": 128, "threads": 1})
    wide = attention_space(OP.problem(heads=1, seq=60, seq_k=200, head_dim=256, dtype="fp64"), CPU)
    assert "bm=64, bn=128 at head_dim 256 make 832 KiB of tiles per work item, more than the 512 KiB of L2" in \
        wide.why_invalid({"bm": 64, "bn": 128, "threads": 1})
    assert "bm=64 makes 1 work item(s)" in wide.why_invalid({"bm": 64, "bn": 32, "threads": 2})
    assert NUMBA.space(OP.problem(heads=1, seq=8, head_dim=64), CPU) == \
        "the cpu backend does fp32 and fp64, not bf16"
