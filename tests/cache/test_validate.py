"""The GEMM validator that `tracea cache import` uses: whole space where the architecture is known, else names/values."""

from __future__ import annotations

import pytest

from tracea_cli.cache.validate import arch_of_key, gemm_validator
from tracea_cli.space import Param, SearchSpace


def fake_space_for(problem, target):
    """A stand-in for ops.gemm.spaces.space_for: tile sizes limited by the target's shared memory, if any."""

    def fits(config):
        if target.limits is None:
            return None
        need = config["tile"] * config["tile"] * 4 * 2
        limit = target.limits.max_shared_per_block_optin
        return f"needs {need} bytes of shared memory, more than {limit}" if need > limit else None

    return SearchSpace(params=(Param("tile", (16, 64, 256)), Param("stages", (1, 2, 3))), rules=(fits,))


@pytest.fixture
def validate(monkeypatch):
    import tracea_cli.ops.gemm.spaces as spaces

    monkeypatch.setattr(spaces, "space_for", fake_space_for)
    return gemm_validator()


BIG = {"tile": 256, "stages": 2}  # 512 KiB of shared memory: more than any GPU has


def test_known_architecture_checks_the_limits(validate, mk_key):
    key = mk_key(1024, backend="cuda", device_class="NVIDIA H200", arch="sm_90")
    assert validate(key, {"tile": 64, "stages": 3}) is None
    assert "shared memory" in validate(key, BIG)


def test_architecture_found_in_the_device_class(validate, mk_key):
    key = mk_key(1024, backend="cuda", device_class="NVIDIA A100 sm_80 108 SMs")
    assert arch_of_key(key) == "sm_80"
    assert "shared memory" in validate(key, BIG)


def test_unknown_architecture_checks_names_and_values_only(validate, mk_key):
    key = mk_key(1024, backend="cuda", device_class="Future GPU", arch="sm_999")
    assert arch_of_key(key) is None
    assert validate(key, BIG) is None  # limits unknown: not checked
    assert "tile=48 is not one of" in validate(key, {"tile": 48, "stages": 2})
    assert "unknown parameter" in validate(key, {"tile": 16, "stages": 2, "evil": "x"})


def test_cpu_keys_check_the_whole_space(validate, mk_key):
    key = mk_key(256)
    assert validate(key, BIG) is None  # the CPU target has no shared-memory limit
    assert "stages=7" in validate(key, {"tile": 16, "stages": 7})


@pytest.mark.parametrize(
    "fields, reason",
    [
        (dict(op="conv2d"), "no search space for the operation 'conv2d'"),
        (dict(dtype="fp8"), "unknown dtype 'fp8'"),
        (dict(layout="tn"), "unknown layout 'tn'"),
    ],
)
def test_keys_without_a_space_are_refused(validate, mk_key, fields, reason):
    assert reason in validate(mk_key(64, **fields), {"tile": 16, "stages": 1})


def test_a_missing_space_module_refuses_rather_than_trusts(monkeypatch, mk_key):
    import tracea_cli.ops.gemm.spaces as spaces

    def absent(problem, target):
        raise ModuleNotFoundError("No module named 'tracea_cli.ops.gemm.cpu_space'", name="tracea_cli.ops.gemm.cpu_space")

    monkeypatch.setattr(spaces, "space_for", absent)
    assert "not available in this installation" in gemm_validator()(mk_key(64), {"tile": 16, "stages": 1})


def test_unknown_architecture_keeps_the_real_space_s_own_handling(mk_key):
    """With the real GEMM space (every family on the stand-in architecture): an mma configuration stored before
    slice_k existed still validates; a wgmma one too; a value outside the space does not."""
    key = mk_key(1024, backend="cuda", device_class="Future GPU", arch="sm_999", dtype="fp16")
    validate = gemm_validator()
    old_mma = {"family": "mma", "block_m": 128, "block_n": 128, "block_k": 32, "warp_m": 64, "warp_n": 64, "stages": 4,
               "split_k": 1, "group_m": 8, "vec": 8}
    assert validate(key, old_mma) is None
    assert validate(key, {**old_mma, "slice_k": 1}) is None
    assert "block_m=48" in validate(key, {**old_mma, "block_m": 48})

