"""The CPU GEMM search space: pure, every rejection explained, rules that hold for everything kept."""

import itertools

import pytest

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.gemm.families.numba import NUMBA, KernelSpec, micro_kernel_source
from tracea_cli.ops.gemm.families.numba_space import (
    VECTOR_REGISTERS,
    describe,
    gemm_space,
    hand_picked,
    thread_counts,
)
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.numba_family import WIDE_VECTOR_BYTES, lanes, registers_for
from tracea_cli.target import Target

AWKWARD = (1, 17, 127, 1000, 1023)
# A Latin square: every awkward size in every dimension, every (M, N) pair once.
SHAPES = [(2048, 2048, 2048), (4096, 7168, 2048), (1, 4096, 4096),
          *((AWKWARD[i], AWKWARD[j], AWKWARD[(i + j) % 5]) for i, j in itertools.product(range(5), repeat=2))]


def _target(threads: int, isa: str = "avx512f") -> Target:
    return Target(backend="cpu", device_class=f"test cpu | {threads} threads | {isa}", threads=threads)


@pytest.mark.parametrize("isa, vector", [("avx512f", 64), ("avx2", 32)])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("threads", [1, 2, 16])
def test_every_rejection_has_a_reason_and_every_kept_config_obeys_the_rules(dtype, threads, isa, vector):
    for m, n, k in SHAPES:
        problem = GemmProblem(m, n, k, dtype=dtype, layout="nt")
        space = gemm_space(problem, _target(threads, isa))
        kept = space.valid_configs()
        assert kept, f"no valid configuration for {problem.label}"
        for config, reason in space.rejections():
            assert isinstance(reason, str) and len(reason) > 20, (config, reason)
        for c in kept:
            assert c["vector"] == vector
            assert registers_for(c["mr"], c["nr"], dtype, vector) <= VECTOR_REGISTERS[vector]
            assert c["nr"] % lanes(dtype, vector) == 0
            assert c["mc"] % c["mr"] == 0 and c["nc"] % c["nr"] == 0
            assert c["threads"] <= threads
            if c["threads"] > 1:
                blocks = -(-m // c["mc"]) if c["parallel"] == "m" else -(-n // c["nc"])
                assert blocks >= c["threads"], c
            else:
                assert c["parallel"] == "m"
            if c["parallel"] == "n":
                assert -(-m // c["mc"]) <= 2 * c["threads"]


def test_space_size_stays_a_few_hundred_and_compiles_few_kernels():
    problem = GemmProblem(2048, 2048, 2048)
    kept = gemm_space(problem, _target(2)).valid_configs()
    assert 50 <= len(kept) <= 300
    kernels = {(c["mr"], c["nr"], c["parallel"]) for c in kept}
    assert len(kernels) <= 12


def test_rules_explain_themselves():
    problem = GemmProblem(17, 19, 33)
    space = gemm_space(problem, _target(2))
    base = {"mr": 4, "nr": 32, "vector": 64, "mc": 64, "kc": 256, "nc": 512, "pack_a": True, "parallel": "m",
            "threads": 1}
    assert space.why_invalid(base) is None
    assert "spill" in gemm_space(GemmProblem(64, 64, 64), _target(2)).why_invalid({**base, "mr": 8, "nr": 64})
    assert "not a multiple of mr=6" in gemm_space(GemmProblem(999, 999, 999), _target(2)).why_invalid({**base, "mr": 6})
    assert "kc=256 already covers it" in space.why_invalid({**base, "kc": 512})
    assert "nr=32 already covers it" in space.why_invalid({**base, "nr": 64, "nc": 512})
    assert "a thread would idle" in space.why_invalid({**base, "threads": 2})
    assert "makes no difference" in space.why_invalid({**base, "parallel": "n"})
    tall = gemm_space(GemmProblem(2048, 2048, 64), _target(2))
    assert "packs B again for each of M's 32 blocks" in tall.why_invalid({**base, "parallel": "n", "threads": 2})
    assert "not one of" in space.why_invalid({**base, "threads": 3})


def test_without_512_bit_vectors_the_tiles_fit_sixteen_ymm():
    """On an AVX2 target a zmm would be two ymm (and every tile of 64-byte vectors spills): the kernels use 32-byte
    vectors and the register rule counts 16 of them, so 6x16 (12 accumulators) is the widest fp32 tile."""
    problem = GemmProblem(2048, 2048, 2048)
    space = gemm_space(problem, _target(2, "avx2"))
    assert space.param("vector").values == (32,) and space.param("nr").values == (16, 32)
    base = {"mr": 6, "nr": 16, "vector": 32, "mc": 96, "kc": 256, "nc": 4096, "pack_a": True, "parallel": "m",
            "threads": 2}
    assert space.why_invalid(base) is None
    assert "needs 19 vector registers of 32 bytes" in space.why_invalid({**base, "mr": 8, "mc": 64})
    assert "more than 16 spill" in space.why_invalid({**base, "mr": 4, "nr": 32, "mc": 64})
    assert {(c["mr"], c["nr"]) for c in hand_picked(problem, _target(2, "avx2"))} == {(6, 16), (4, 16)}
    assert describe(base).endswith(" ymm") and not describe({**base, "vector": 64}).endswith("ymm")
    assert gemm_space(problem, _target(2, "avx512f")).param("vector").values == (64,)


def test_threads_follow_the_target():
    assert thread_counts(1) == (1,)
    assert thread_counts(2) == (1, 2)
    assert thread_counts(16) == (1, 8, 16)
    assert gemm_space(GemmProblem(64, 64, 64), _target(16)).param("threads").values == (1, 8, 16)


def test_space_is_pure_and_dispatched_for_cpu_targets():
    problem = GemmProblem(1000, 1023, 127, dtype="fp64")
    a = gemm_space(problem, _target(2)).valid_configs()
    b = OpBackend("gemm", "cpu").space(problem, _target(2)).valid_configs()
    assert a == b


def test_cpu_space_refuses_gpu_dtypes():
    with pytest.raises(ValueError, match="fp32 and fp64"):
        gemm_space(GemmProblem(64, 64, 64, dtype="fp16"), _target(2))
    assert "fp32 and fp64, not fp16" in NUMBA.space(GemmProblem(64, 64, 64, dtype="fp16"), _target(2))
    assert NUMBA.suggested(GemmProblem(64, 64, 64, dtype="fp16"), _target(2)) == []


@pytest.mark.parametrize("isa", ["avx512f", "avx2"])
@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (1, 4096, 4096), (17, 19, 33), (1, 1, 1), (1023, 1000, 127)])
def test_hand_picked_configs_are_valid(shape, isa):
    problem = GemmProblem(*shape)
    space = gemm_space(problem, _target(2, isa))
    picks = hand_picked(problem, _target(2, isa))
    assert picks
    for c in picks:
        assert space.why_invalid(c) is None, describe(c)
    assert len({describe(c) for c in picks}) == len(picks)


@pytest.mark.parametrize("isa, vector", [("avx512f", 64), ("avx2", 32)])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_space_and_kernels_agree_on_the_vector(dtype, isa, vector):
    """The micro-kernel's loads and FMAs are as wide as the vector the space counts registers in."""
    problem = GemmProblem(64, 64, 64, dtype=dtype)
    config = hand_picked(problem, _target(2, isa))[0]
    source = NUMBA.source(problem, config)
    spec = KernelSpec.of(problem, config)
    width = lanes(dtype, vector)
    assert spec.vector == vector and spec.lanes == width and width * (4 if dtype == "fp32" else 8) == vector
    assert micro_kernel_source(config["mr"], config["nr"], width, prefetch=spec.line) in source
    assert spec.line == lanes(dtype, WIDE_VECTOR_BYTES)  # the prefetch takes one 64-byte line per K step, whatever the vector
    assert f"vload(b, bp + 0, {width})" in source and f"LANES = {width} " in source
    assert (spec.name.endswith("_ymm")) == (vector == 32)  # the two widths compile apart
