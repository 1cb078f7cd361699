"""The validator `tracea cache import` uses (backends/op_backend.config_validator): each configuration against the
real search space of its key's problem, op from the registry, family by the configuration; the whole space where the
key tells the target, else parameter names and values only."""

from __future__ import annotations

import pytest

from tracea_cli.backends.op_backend import config_validator, target_of_key

MMA = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 4,
       "split_k": 1, "group_m": 8, "vec": 8}
HUGE_MMA = {**MMA, "block_m": 256, "block_k": 64, "stages": 5}  # more shared memory than any GPU has
CPU = {"mr": 6, "nr": 64, "mc": 96, "kc": 256, "nc": 512, "pack_a": True, "parallel": "m", "threads": 2}


@pytest.fixture
def validate():
    return config_validator()


def test_a_known_architecture_checks_the_limits(validate, mk_key):
    key = mk_key(4096, backend="cuda", dtype="fp16", device_class="NVIDIA H200", arch="sm_90")
    assert validate(key, MMA) is None
    assert "shared memory" in validate(key, HUGE_MMA)


def test_the_architecture_is_found_in_the_device_class(validate, mk_key):
    key = mk_key(4096, backend="cuda", dtype="fp16", device_class="NVIDIA A100 sm_80 108SM")
    assert target_of_key(key)[0].arch == "sm_80"
    assert "shared memory" in validate(key, HUGE_MMA)


def test_an_unknown_architecture_checks_names_and_values_only(validate, mk_key):
    key = mk_key(4096, backend="cuda", dtype="fp16", device_class="Future GPU", arch="sm_999")
    assert target_of_key(key)[1] is False
    assert validate(key, HUGE_MMA) is None  # limits unknown: not checked
    assert "block_m=48 is not one of" in validate(key, {**MMA, "block_m": 48})
    assert "unknown parameter" in validate(key, {**MMA, "evil": "x"})
    assert validate(key, {**MMA, "slice_k": 1}) is None  # stored with or without a later-added parameter


def test_cpu_keys_check_the_whole_space_with_the_keys_thread_count(validate, mk_key):
    key = mk_key(1024)  # "... | 2 threads | ...": the configurations of a 2-thread CPU are valid
    assert validate(key, CPU) is None
    assert "mr=5 is not one of" in validate(key, {**CPU, "mr": 5})
    other = mk_key(1024, device_class="test-cpu | 8 threads | avx2")
    narrow = {**CPU, "nr": 16, "vector": 32, "threads": 8}  # an AVX2 CPU's tiles are of 32-byte vectors
    assert validate(other, narrow) is None and "threads=8" in validate(key, {**CPU, "threads": 8})
    # a 64-byte tile (all that releases before 2026-12-07 offered there; it spilled) is outside an AVX2 CPU's space
    assert "nr=64 is not one of [16, 32]" in validate(other, {**CPU, "threads": 8})


@pytest.mark.parametrize(
    "fields, reason",
    [
        (dict(op="conv9d"), "unknown operation 'conv9d'"),
        (dict(dtype="fp8"), "dtype"),
        (dict(layout="tn"), "unknown layout 'tn'"),
        (dict(backend="rocm"), "the rocm backend has no kernels"),
    ],
)
def test_keys_without_a_space_are_refused(validate, mk_key, fields, reason):
    assert reason in validate(mk_key(64, **fields), CPU)


def test_a_wgmma_configuration_is_checked_against_its_family(validate, mk_key):
    from tracea_cli.ops.gemm.families.wgmma_space import default_config
    from tracea_cli.target import arch_target

    from tracea_cli.ops.gemm.problem import GemmProblem

    config = default_config(GemmProblem(4096, 4096, 4096, "bf16"), arch_target("sm_90"))
    assert validate(mk_key(4096, backend="cuda", dtype="bf16", arch="sm_90", device_class="H200"), config) is None
    reason = validate(mk_key(4096, backend="cuda", dtype="bf16", arch="sm_80", device_class="A100"), config)
    assert "wgmma family needs an sm_90 target" in reason
