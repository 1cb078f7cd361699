"""The numba conv2d kernels (implicit GEMM): correct on shapes no tile divides (odd H and W, stride 2, dilation 2,
padding 0..3, C in {3, 12, 100}, odd K), fp32 and fp64, every epilogue, with blocks that leave ragged pixel, channel
and input-channel blocks; and the search space's rules, each rejection explained.

A kernel spec (dtype, register tile) compiles once per process, in seconds, so the tests reuse two specs and vary
everything chosen at run time (geometry, epilogue, blocks, threads) from shape to shape.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.backends.checked import poison, upload
from tracea_cli.backends.cpu import call, compiled_entry, kernel_cache_dir
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.conv2d.families.numba import NUMBA
from tracea_cli.ops.conv2d.families.numba_space import conv2d_space, hand_picked
from tracea_cli.ops.conv2d.problem import EPILOGUE_NAMES, make_inputs, reference
from tracea_cli.ops.numba_family import lanes, registers_for
from tracea_cli.ops.registry import get_op
from tracea_cli.ops.verify import check
from tracea_cli.target import Target

sys.path.insert(0, str(Path(__file__).parents[1] / "ops"))
from conv2d_direct import AWKWARD  # noqa: E402

numba = pytest.importorskip("numba")
OP = get_op("conv2d")
THREADS = min(2, numba.config.NUMBA_NUM_THREADS)
KERNELS = {"fp32": {"mr": 6, "nr": 16}, "fp64": {"mr": 4, "nr": 8}}
# Run-time choices, cycled over the shapes: small blocks so that several pixel and channel blocks, ragged ones, and
# several input-channel blocks (Y accumulated in memory, C = 100 in blocks of 16 or 12) all occur.
RUN_TIME = [
    {"mb": 48, "nb": 32, "cb": 16, "threads": THREADS},
    {"mb": 96, "nb": 64, "cb": 256, "threads": 1},
    {"mb": 12, "nb": 16, "cb": 12, "threads": THREADS},
]
CPU = Target(backend="cpu", device_class="test cpu | 2 threads", threads=2)


def run_conv2d(problem, config: dict, inputs: dict) -> np.ndarray:
    """Y for `inputs` from the kernel the CPU runtime would run for `config`, written into a NaN-poisoned Y."""
    (step,) = NUMBA.launch(problem, config).steps
    step = dataclasses.replace(step, threads=int(config["threads"]))
    entry = compiled_entry(NUMBA.source(problem, config), step, kernel_cache_dir())
    operands = upload(np, OP.tensors(problem), inputs, problem.dtype)
    poison(operands["Y"], problem.dtype)
    call(entry, step, NUMBA.args(problem, operands))
    return operands["Y"]


CASES = [(dtype, i, shape, EPILOGUE_NAMES[(i + j) % len(EPILOGUE_NAMES)])
         for j, dtype in enumerate(("fp32", "fp64")) for i, shape in enumerate(AWKWARD)]


@pytest.mark.parametrize("dtype, i, shape, epilogue", CASES,
                         ids=[f"{d}-{i}-{e}" for d, i, _, e in CASES])
def test_kernels_match_the_reference_on_awkward_shapes(dtype, i, shape, epilogue):
    p = OP.problem(**shape, dtype=dtype, epilogue=epilogue)
    config = {**KERNELS[dtype], **RUN_TIME[i % len(RUN_TIME)]}
    inputs = make_inputs(p, np.random.default_rng(i))
    verdict = check(np.asarray(run_conv2d(p, config, inputs), np.float64), reference(p, inputs)["Y"], dtype)
    assert verdict.ok, (p.label, config, verdict.reason)


@pytest.mark.parametrize("epilogue", EPILOGUE_NAMES)
def test_every_epilogue_on_a_resnet_like_layer_with_ragged_blocks(epilogue):
    p = OP.problem(n=1, h=15, w=13, c=24, k=20, r=3, pad=1, epilogue=epilogue)
    inputs = make_inputs(p, np.random.default_rng(7))
    config = {**KERNELS["fp32"], "mb": 48, "nb": 16, "cb": 16, "threads": THREADS}
    verdict = check(np.asarray(run_conv2d(p, config, inputs), np.float64), reference(p, inputs)["Y"], "fp32")
    assert verdict.ok, verdict.reason


def test_a_wrong_kernel_would_be_caught():
    """The check the tests rely on fails on a result that misses one tap: the tests can fail."""
    p = OP.problem(n=1, h=9, w=7, c=3, k=5, r=3, pad=1)
    inputs = make_inputs(p, np.random.default_rng(0))
    y = run_conv2d(p, {**KERNELS["fp32"], **RUN_TIME[0]}, inputs)
    ref = reference(p, inputs)["Y"]
    assert check(np.asarray(y, np.float64), ref, "fp32").ok
    short = dict(inputs, W=inputs["W"].copy())
    short["W"][:, 0, 0, :] = 0
    assert not check(np.asarray(y, np.float64), reference(p, short)["Y"], "fp32").ok


def test_the_real_path_checks_then_times_a_suggested_configuration():
    p = OP.problem(n=1, h=11, w=9, c=12, k=17, r=3, stride=2, pad=1, epilogue="bias_silu")
    backend = OpBackend("conv2d", "cpu")
    config = backend.suggested(p, CPU)[0]
    assert (config["mr"], config["nr"]) == (KERNELS["fp32"]["mr"], KERNELS["fp32"]["nr"])  # compiled above already
    artifact = backend.compile(p, config, CPU)
    from tracea_cli.timing import TimingPolicy

    ev = backend.evaluate(artifact, p, CPU, policy=TimingPolicy(warmup=1, min_samples=2, max_samples=3), seed=3)
    assert ev.ok and ev.rel_error <= 1e-5 and ev.samples.n >= 2


# ---- the space ----------------------------------------------------------------------------------------------------

SPACE_PROBLEMS = [dict(n=1, h=56, c=64, k=64, r=3, pad=1), dict(n=1, h=7, c=512, k=512, r=3, pad=1),
                  dict(n=1, h=9, w=7, c=3, k=5, r=3, dtype="fp64"), dict(n=1, h=224, c=3, k=64, r=7, stride=2, pad=3)]


@pytest.mark.parametrize("shape", SPACE_PROBLEMS, ids=lambda s: f"{s['c']}-{s['k']}-{s['h']}")
def test_every_rejection_is_explained_and_the_picks_are_valid(shape):
    p = OP.problem(**shape)
    space = conv2d_space(p, CPU)
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
    p = OP.problem(n=1, h=56, c=64, k=64, r=3, pad=1)
    space = conv2d_space(p, CPU)
    base = {"mr": 6, "nr": 16, "mb": 96, "nb": 64, "cb": 64, "threads": 2}
    assert space.why_invalid(base) is None
    assert registers_for(3, 32, "fp32", 32) == 17
    assert "needs 17 vector registers" in space.why_invalid({**base, "mr": 3, "nr": 32})
    from tracea_cli.ops.conv2d.families import numba_space as ns

    assert all(mb % mr == 0 for mb in ns.MB for mr in ns.MR)  # blocks hold whole tiles: no rule needed
    assert all(nb % (v * lanes(d, ns.VECTOR_BYTES)) == 0 for nb in ns.NB for v in ns.NR_VECTORS for d in ns.DTYPES)
    assert "cb=128 is larger than C=64 needs" in space.why_invalid({**base, "cb": 128})
    assert "nb=128 is larger than K=64 needs" in space.why_invalid({**base, "nb": 128})
    small = conv2d_space(OP.problem(n=1, h=9, w=7, c=3, k=5, r=3), CPU)
    assert "a thread would idle" in small.why_invalid({"mr": 4, "nr": 8, "mb": 48, "nb": 32, "cb": 16, "threads": 2})
    assert "nr=16 is larger than K=5 needs" in small.why_invalid({"mr": 4, "nr": 16, "mb": 48, "nb": 32, "cb": 16,
                                                                  "threads": 1})
    assert "mb=96 is larger than N·P·Q=35 needs" in small.why_invalid({"mr": 4, "nr": 8, "mb": 96, "nb": 32, "cb": 16,
                                                                       "threads": 1})


def test_only_the_register_tile_selects_a_compiled_kernel():
    p = OP.problem(n=1, h=56, c=64, k=64, r=3, pad=1)
    a = {"mr": 6, "nr": 16, "mb": 96, "nb": 64, "cb": 64, "threads": 2}
    b = {**a, "mb": 192, "cb": 32, "threads": 1}
    assert NUMBA.source(p, a) == NUMBA.source(p, b) != NUMBA.source(p, {**a, "mr": 4})
    assert NUMBA.source(p, a) == NUMBA.source(OP.problem(n=2, h=9, c=3, k=5, r=1, epilogue="bias"), a)
    assert NUMBA.space(OP.problem(n=1, h=8, c=4, k=4, r=3, dtype="fp16"), CPU) == \
        "the cpu backend does fp32 and fp64, not fp16"


AVX512 = Target(backend="cpu", device_class="test cpu | 2 threads | avx512f", threads=2)


def test_512_bit_vectors_are_offered_where_the_target_has_them_and_compute_the_same():
    """A target whose device class names AVX-512 gets `vector` 64 (zmm: 32 registers, twice the lanes) beside 32, and
    its picks use it; elsewhere the space is the ymm one it always was. Results match the reference either way (on
    a machine without AVX-512, LLVM splits the 512-bit vectors)."""
    p = OP.problem(n=1, h=13, w=11, c=24, k=40, r=3, pad=1)
    assert conv2d_space(p, CPU).param("vector").values == (32,)
    wide = conv2d_space(p, AVX512)
    assert wide.param("vector").values == (32, 64) and wide.param("vector").default == 32
    assert registers_for(6, 32, "fp32", 64) == 15 and registers_for(6, 32, "fp32", 32) == 29
    base = {"mr": 6, "nr": 32, "mb": 48, "nb": 64, "cb": 32, "threads": 2}
    assert wide.why_invalid({**base, "vector": 64}) is None
    assert "needs 29 vector registers" in wide.why_invalid(base)  # 4 ymm per row: too many for 16 ymm
    assert "not 1, 2 or 4 vectors of 16 fp32 lanes" in wide.why_invalid({**base, "nr": 8, "vector": 64})
    # a block of output channels holds whole strips: 4 zmm of fp32 are 64 channels, more than nb=32 (caught by the
    # check in a bench run before this rule: wrong results, relative error 0.999)
    assert "nb=32 is not a whole number of nr=64 strips" in wide.why_invalid(
        {**base, "mr": 6, "nr": 64, "vector": 64, "nb": 32, "threads": 1})
    assert all(int(c["nb"]) % int(c["nr"]) == 0 for c in wide.valid_configs())
    picks = hand_picked(p, AVX512)
    assert picks and all(c["vector"] == 64 for c in picks)
    assert all(c.get("vector", 32) == 32 for c in hand_picked(p, CPU))
    inputs = make_inputs(p, np.random.default_rng(5))
    ref = reference(p, inputs)["Y"]
    for config in (picks[0], {**base, "vector": 64}, {**base, "nr": 64, "nb": 64, "vector": 64}):
        out = run_conv2d(p, config, inputs)
        assert check(out.astype(np.float64), ref, p.dtype).ok, config
    assert "_v64" in NUMBA.source(p, {**base, "vector": 64}) and "vload(wp, bp + 16, 16)" in NUMBA.source(
        p, {**base, "vector": 64})
