"""The numba lowrank-mlp kernel (two-phase blocking): correct on shapes no tile divides (M < MR, M ragged, rank not
a multiple of NR, d_in ≠ d_out, several kc passes), both layouts, every activation, with and without bias and
residual, fp32 and fp64; through the real check-then-time path; and the search space's rules, each rejection
explained.

A kernel spec (dtype, register tile) compiles once per process, in seconds, so the tests reuse two specs (the ones
the tuner suggests first, so that the CLI test loads them from the session's kernel cache) and vary everything
chosen at run time from case to case.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea_cli.backends.checked import poison, upload
from tracea_cli.backends.cpu import call, compiled_entry, kernel_cache_dir
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.lowrank_mlp.families.numba import NUMBA
from tracea_cli.ops.lowrank_mlp.families.numba_space import hand_picked, lowrank_space
from tracea_cli.ops.lowrank_mlp.problem import ACTS, make_inputs, reference
from tracea_cli.ops.registry import get_op
from tracea_cli.ops.verify import check
from tracea_cli.target import Target

numba = pytest.importorskip("numba")
OP = get_op("lowrank-mlp")
THREADS = min(2, numba.config.NUMBA_NUM_THREADS)
KERNELS = {"fp32": {"mr": 6, "nr": 16}, "fp64": {"mr": 4, "nr": 8}}
RUN_TIME = [{"mb": 24, "kc": 128, "threads": THREADS}, {"mb": 48, "kc": 512, "threads": 1},
            {"mb": 96, "kc": 256, "threads": THREADS}]
CPU = Target(backend="cpu", device_class="test cpu | 2 threads", threads=2)
# (m, d_in, rank, d_out): M below one tile, ragged M, rank 16/48/64/100 (not all multiples of NR), d_in ≠ d_out,
# d_in deeper than kc (several passes, a ragged last one)
SHAPES = [(5, 40, 16, 24), (37, 300, 48, 70), (100, 129, 100, 130), (64, 600, 64, 64), (13, 17, 3, 9)]


def run_lowrank(problem, config: dict, inputs: dict) -> np.ndarray:
    """y for `inputs` from the kernel the CPU runtime would run for `config`, written into a NaN-poisoned y."""
    (step,) = NUMBA.launch(problem, config).steps
    step = dataclasses.replace(step, threads=int(config["threads"]))
    entry = compiled_entry(NUMBA.source(problem, config), step, kernel_cache_dir())
    operands = upload(np, OP.tensors(problem), inputs, problem.dtype)
    poison(operands["y"], problem.dtype)
    call(entry, step, NUMBA.args(problem, operands))
    return np.asarray(operands["y"], np.float64)


CASES = [(dtype, i, shape, ACTS[(i + j) % 4], layout, (i + j) % 3 != 1, (i + j) % 2 == 0)
         for j, dtype in enumerate(("fp32", "fp64")) for i, shape in enumerate(SHAPES) for layout in ("nn", "nt")]


@pytest.mark.parametrize("dtype, i, shape, act, layout, bias, residual", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3]}-{c[4]}" for c in CASES])
def test_kernels_match_the_reference_on_awkward_shapes(dtype, i, shape, act, layout, bias, residual):
    m, d_in, rank, d_out = shape
    p = OP.problem(m=m, d_in=d_in, rank=rank, d_out=d_out, dtype=dtype, act=act, bias=bias, residual=residual,
                   layout=layout)
    config = {**KERNELS[dtype], **RUN_TIME[i % len(RUN_TIME)]}
    inputs = make_inputs(p, np.random.default_rng(i))
    verdict = check(run_lowrank(p, config, inputs), reference(p, inputs)["y"], dtype)
    assert verdict.ok, (p.label, config, verdict.reason)


AVX512 = Target(backend="cpu", device_class="test cpu | 2 threads | avx512f", threads=2)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_a_target_with_512_bit_vectors_gets_them_and_they_compute_the_same(dtype):
    """Where the device class names AVX-512 the space's `vector` is 64 (zmm: 32 registers, twice the lanes), else 32;
    the kernels of both widths match the float64 reference on ragged shapes (without AVX-512, LLVM would split the
    512-bit vectors)."""
    p = OP.problem(m=37, d_in=300, rank=48, d_out=70, dtype=dtype, act="silu", residual=True)
    assert lowrank_space(p, CPU).param("vector").values == (32,)
    wide = lowrank_space(p, AVX512)
    assert wide.param("vector").values == (64,)
    lanes = 16 if dtype == "fp32" else 8
    assert wide.param("nr").values == (lanes, 2 * lanes, 4 * lanes)
    assert "needs 37 vector registers of 64 bytes" in wide.why_invalid(
        {"mr": 8, "nr": 4 * lanes, "vector": 64, "mb": 48, "kc": 256, "threads": 1})
    picks = hand_picked(p, AVX512)
    assert picks and all(c["vector"] == 64 for c in picks)
    inputs = make_inputs(p, np.random.default_rng(3))
    ref = reference(p, inputs)["y"]
    for config in picks[:2]:
        assert "_v64" in NUMBA.source(p, config) and f"LANES = {lanes} " in NUMBA.source(p, config)
        verdict = check(run_lowrank(p, config, inputs), ref, p.dtype)
        assert verdict.ok, (config, verdict.reason)


def test_a_wrong_kernel_would_be_caught():
    """The check the tests rely on fails on a result that misses one rank column: the tests can fail."""
    p = OP.problem(m=13, d_in=17, rank=3, d_out=9, act="relu")
    inputs = make_inputs(p, np.random.default_rng(0))
    y = run_lowrank(p, {**KERNELS["fp32"], **RUN_TIME[0]}, inputs)
    assert check(y, reference(p, inputs)["y"], "fp32").ok
    short = dict(inputs, U=inputs["U"].copy())
    short["U"][:, 2] = 0
    assert not check(y, reference(p, short)["y"], "fp32").ok


def test_the_real_path_checks_then_times_a_suggested_configuration():
    p = OP.problem(m=70, d_in=50, rank=12, d_out=33, act="silu", residual=True)
    backend = OpBackend("lowrank-mlp", "cpu")
    config = backend.suggested(p, CPU)[0]
    assert (config["mr"], config["nr"]) == (KERNELS["fp32"]["mr"], KERNELS["fp32"]["nr"])  # compiled above already
    artifact = backend.compile(p, config, CPU)
    from tracea_cli.timing import TimingPolicy

    ev = backend.evaluate(artifact, p, CPU, policy=TimingPolicy(warmup=1, min_samples=2, max_samples=3), seed=3)
    assert ev.ok and ev.rel_error <= 1e-5 and ev.samples.n >= 2
    label, base = backend.baseline(p, CPU, policy=TimingPolicy(warmup=1, min_samples=2, max_samples=3), seed=3)
    assert base.ok and label.startswith(("torch-unfused", "numpy-unfused"))


# ---- the space ----------------------------------------------------------------------------------------------------

SPACE_PROBLEMS = [dict(m=256, d_in=128, rank=16), dict(m=16384, d_in=4096, rank=64),
                  dict(m=5, d_in=40, rank=16, d_out=24, dtype="fp64"), dict(m=1000, d_in=300, rank=100, d_out=500)]


@pytest.mark.parametrize("shape", SPACE_PROBLEMS, ids=lambda s: f"{s['m']}-{s['d_in']}-{s['rank']}")
def test_every_rejection_is_explained_and_the_picks_are_valid(shape):
    p = OP.problem(**shape)
    space = lowrank_space(p, CPU)
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
    p = OP.problem(m=256, d_in=128, rank=16)
    space = lowrank_space(p, CPU)
    base = {"mr": 6, "nr": 16, "mb": 48, "kc": 128, "threads": 2}
    assert space.why_invalid(base) is None
    assert "a 4x32 register tile needs 21 vector registers" in space.why_invalid({**base, "mr": 4, "nr": 32})
    assert "kc=256 is deeper than d_in=128 needs" in space.why_invalid({**base, "kc": 256})
    small = lowrank_space(OP.problem(m=5, d_in=40, rank=4, d_out=8), CPU)
    assert "a thread would idle" in small.why_invalid({"mr": 2, "nr": 8, "mb": 24, "kc": 128, "threads": 2})
    assert "nr=16 is larger than max(rank, d_out)=8 needs" in small.why_invalid(
        {"mr": 2, "nr": 16, "mb": 24, "kc": 128, "threads": 1})
    assert "mb=48 is larger than M=5 needs" in small.why_invalid({"mr": 2, "nr": 8, "mb": 48, "kc": 128, "threads": 1})
