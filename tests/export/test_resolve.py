"""Where each exported configuration comes from, and what is on record about it: files, shipped defaults, the cache."""

from __future__ import annotations

import json

import pytest
from export_helpers import cache_key, tune_command_problem

from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.cache import Trial, TuningCache
from tracea_cli.errors import UsageError
from tracea_cli.export import resolve
from tracea_cli.export.defaults import load_defaults
from tracea_cli.export.manifest import COMPILED_ONLY, VERIFIED
from tracea_cli.export.writer import export_target
from tracea_cli.ops import shipped
from tracea_cli.ops.gemm.defaults import DTYPES, FAMILIES, big_problems, candidates
from tracea_cli.ops.gemm.problem import GemmProblem

FP16 = GemmProblem(512, 512, 512, "fp16")
GOOD = {"family": "mma", "block_m": 64, "block_n": 64, "block_k": 32, "warp_m": 32, "warp_n": 32, "stages": 3, "vec": 8,
        "group_m": 1, "split_k": 1}


BACKEND = OpBackend("gemm", "cuda")


def space_of(problem: GemmProblem, arch: str):
    """What the export asks (writer.export): a configuration's verdict in its family's space on `arch`."""
    return lambda config: BACKEND.why_invalid(problem, export_target(arch), config)


# ---- --config FILE ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [GOOD, {"config": GOOD}, {"winner": {"config": GOOD, "median_ms": 1.0}}])
def test_a_configuration_file_may_be_bare_or_wrapped(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content))
    choices = resolve.from_file(path, [FP16], ["sm_80", "sm_90"], space_of)
    assert [c.arch for c in choices] == ["sm_80", "sm_90"]
    assert all(c.config == GOOD and c.origin == "file" and c.verification.status == COMPILED_ONLY for c in choices)


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "does not hold a configuration"),
    (json.dumps({**GOOD, "block_m": 48}), "block_m=48 is not one of"),
    (json.dumps({**GOOD, "unroll": 4}), "unknown parameter"),
    (json.dumps({**GOOD, "block_m": 256, "block_n": 256, "block_k": 64, "warp_m": 64, "warp_n": 64, "stages": 5}),
     "registers"),
    (json.dumps({**GOOD, "vec": 16}), "vec=16 is not one of"),
])
def test_a_bad_configuration_file_is_a_usage_error_with_the_reason(tmp_path, text, says):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(UsageError) as e:
        resolve.from_file(path, [FP16], ["sm_80"], space_of)
    assert says in e.value.message and e.value.message.endswith(".")


def test_a_configuration_beyond_an_architectures_limits_is_refused_for_it(tmp_path):
    big = GemmProblem(4096, 4096, 4096, "fp16")
    config = {**GOOD, "block_m": 256, "block_n": 128, "warp_m": 64, "warp_n": 64, "block_k": 64, "stages": 4}
    assert space_of(big, "sm_90")(config) is None  # fits the H100/H200's 227 KiB ...
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    with pytest.raises(UsageError, match="on sm_86: .*shared memory"):  # ... not sm_86's 99 KiB
        resolve.from_file(path, [big], ["sm_90", "sm_86"], space_of)


# ---- --config default ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_the_default_lists_can_be_built_for_every_dtype_and_family(dtype):
    """What `benchmarks/gemm_defaults.py generate` builds: per kernel family, entries that all name the same parameters
    (the small ones included, with the space's defaults for what they leave out), all valid for the large problems;
    on sm_90 the Hopper family's first for the dtypes it has, both with a TMA store and storing from registers."""
    for family, members in FAMILIES.items():
        entries = candidates(dtype, members[0])
        assert len(entries) >= 3, family
        kernels = [e["family"] for e in entries]
        assert kernels == sorted(kernels, key=lambda k: k != "wgmma"), f"{dtype} {family}: wgmma entries come first"
        for kernel in set(kernels):
            named = {tuple(e) for e in entries if e["family"] == kernel}
            assert len(named) == 1, f"{dtype} {family} {kernel}: entries name different parameters"
        hopper = family == "sm_90" and dtype in ("fp16", "bf16", "tf32")
        assert ("wgmma" in kernels) == hopper, (dtype, family)
        if hopper:
            assert {e["store"] for e in entries if e["family"] == "wgmma"} == {"tma", "direct"}
        for problem in big_problems(dtype):  # as the export names them there (staged entries unstaged)
            assert all(space_of(problem, members[0])(BACKEND.config_in(problem, e)) is None for e in entries), \
                (dtype, family)


def test_families_are_tried_from_the_architectures_own_down():
    defaults = load_defaults("gemm")
    assert {f: tuple(m) for f, m in defaults["families"].items()} == FAMILIES  # the file is what ops/gemm/defaults says
    assert shipped.family_order(defaults, "sm_89") == ["sm_86/89", "sm_80"]
    assert shipped.family_order(defaults, "sm_90a") == ["sm_90", "sm_86/89", "sm_80"]
    assert shipped.family_order(defaults, "sm_120") == ["sm_90", "sm_86/89", "sm_80"]
    assert shipped.family_order(defaults, "sm_75") == []


def test_every_shipped_default_is_in_its_familys_space():
    defaults = load_defaults("gemm")
    for entry in defaults["defaults"]:
        arch = FAMILIES[entry["family"]][0]
        for layout in ("nn", "nt"):
            # a square for most entries; an odd K for the element-wise (predicated) ones, which aligned rows refuse
            problems = [GemmProblem(m, n, k, entry["dtype"], layout) for m, n, k in ((4096, 4096, 4096), (1000, 3000, 777))]
            assert any(space_of(p, arch)(BACKEND.config_in(p, entry["config"])) is None for p in problems), entry
        assert entry["verification"]["status"] in (VERIFIED, COMPILED_ONLY)


@pytest.mark.parametrize("dtype", ["fp32", "tf32", "fp16", "bf16", "fp64"])
def test_a_default_exists_for_every_shape_layout_and_architecture(dtype):
    shapes = [(1, 1, 1), (17, 127, 1000), (1000, 3000, 777), (127, 17, 1023), (4096, 4096, 4096), (512, 512, 512)]
    problems = [GemmProblem(m, n, k, dtype, layout) for m, n, k in shapes for layout in ("nn", "nt")]
    choices = resolve.from_defaults(problems, ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100"], space_of,
                                    name_in=BACKEND.config_in)
    assert len(choices) == len(problems) * 6
    for c in choices:
        assert space_of(c.problem, c.arch)(c.config) is None
    big = next(c for c in choices if c.problem.m == 4096 and c.arch == "sm_90")
    entry = load_defaults("gemm")["defaults"][int(big.origin_detail.rsplit("#", 1)[1])]["config"]
    assert big.config == BACKEND.config_in(big.problem, entry)


def test_a_staged_default_copies_ragged_rows_and_is_the_plain_kernel_on_aligned_ones():
    """fp32's shipped 3xTF32 entries carry stage = 1: a ragged shape gets the first one (vector loads from padded
    copies) rather than the predicated last entry; an aligned shape the same entry without the copies."""
    ragged, aligned = GemmProblem(4095, 4097, 4091, "fp32"), GemmProblem(4096, 4096, 4096, "fp32")
    entries = load_defaults("gemm")["defaults"]
    index, first = next((i, e) for i, e in enumerate(entries) if e["dtype"] == "fp32" and e["family"] == "sm_90")
    assert first["config"]["stage"] == 1 and first["config"]["vec"] == 4
    by_shape = {c.problem: c for c in resolve.from_defaults([ragged, aligned], ["sm_90"], space_of,
                                                              name_in=BACKEND.config_in)}
    assert by_shape[ragged].config == first["config"] and by_shape[ragged].origin_detail.endswith(f"#{index}")
    assert by_shape[aligned].config == {k: v for k, v in first["config"].items() if k != "stage"}
    with pytest.raises(UsageError, match="nearest was rejected"):  # without naming it in the space: refused
        resolve.from_defaults([aligned], ["sm_90"], space_of,
                              defaults={**load_defaults("gemm"), "defaults": [first]})


def test_default_verification_applies_to_its_own_architecture_only():
    defaults = {"families": {"sm_80": ["sm_80"], "sm_90": ["sm_90", "sm_90a"]}, "defaults": [
        {"dtype": "fp16", "family": "sm_90", "config": GOOD,
         "verification": {"status": "verified", "device": "NVIDIA H200 | sm_90", "arch": "sm_90", "rel_error": 3e-4,
                          "date": "2026-11-29", "how": "checked"}},
        {"dtype": "fp16", "family": "sm_80", "config": GOOD, "verification": {"status": "compiled-only", "how": "compiled"}},
    ]}
    by_arch = {c.arch: c for c in resolve.from_defaults([FP16], ["sm_80", "sm_90", "sm_90a", "sm_100"], space_of, defaults)}
    assert by_arch["sm_90"].verification.status == VERIFIED and by_arch["sm_90"].verification.rel_error == 3e-4
    assert by_arch["sm_90a"].verification.status == VERIFIED  # the same family and base architecture
    assert by_arch["sm_100"].verification.status == COMPILED_ONLY  # borrowed from sm_90, never run on sm_100
    assert "never on sm_100" in by_arch["sm_100"].verification.evidence
    assert by_arch["sm_80"].verification.status == COMPILED_ONLY


def test_no_valid_default_is_a_usage_error():
    with pytest.raises(UsageError, match="no shipped default configuration of gemm 512x512x512 fp16 nn is valid on sm_75"):
        resolve.from_defaults([FP16], ["sm_75"], space_of)


# ---- the tuning cache ---------------------------------------------------------------------------------------------------

def key(arch: str, device: str):
    return cache_key(FP16, device, arch)


def test_cached_winners_are_verified_only_on_the_architecture_they_ran_on(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    h200 = "NVIDIA H200 | sm_90 | 132 SMs | 140 GiB | 1980/3201 MHz"
    with TuningCache.open(path) as cache:
        cache.set_winner(key("sm_90", h200), Trial(GOOD, samples_ms=(0.02, 0.021, 0.022), median_ms=0.021, cv=0.02,
                                                   rel_error=2.5e-4, timestamp=1795000000.0))
    warnings: list[str] = []
    h, a = resolve.from_cache([FP16], ["sm_90", "sm_80"], space_of, path, warnings)
    assert h.arch == "sm_90" and h.verification.status == VERIFIED and h.verification.device == h200
    assert h.verification.rel_error == 2.5e-4 and h.verification.bound == 5e-3
    assert h.measurement is not None and h.measurement.median_ms == 0.021 and h.measurement.n == 3
    assert a.arch == "sm_80" and a.verification.status == COMPILED_ONLY and a.measurement is None
    assert "never run on sm_80" in a.verification.evidence and a.config == GOOD


def test_the_winner_of_the_same_architecture_is_preferred_to_a_faster_one(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    other = {**GOOD, "stages": 4}
    with TuningCache.open(path) as cache:
        cache.set_winner(key("sm_80", "NVIDIA A100"), Trial(other, samples_ms=(0.5,), median_ms=0.5, cv=0.0, rel_error=1e-4))
        cache.set_winner(key("sm_90", "NVIDIA H200"), Trial(GOOD, samples_ms=(0.1,), median_ms=0.1, cv=0.0, rel_error=1e-4))
    by_arch = {c.arch: c for c in resolve.from_cache([FP16], ["sm_80", "sm_90", "sm_89"], space_of, path, [])}
    assert by_arch["sm_80"].config == other and by_arch["sm_80"].verification.status == VERIFIED
    assert by_arch["sm_90"].config == GOOD and by_arch["sm_90"].verification.status == VERIFIED
    assert by_arch["sm_89"].config == GOOD and by_arch["sm_89"].verification.status == COMPILED_ONLY  # the fastest


def test_no_cached_winner_says_how_to_get_one(tmp_path):
    with pytest.raises(UsageError) as e:
        resolve.from_cache([FP16], ["sm_90"], space_of, tmp_path / "absent.sqlite3", [])
    assert "holds no tuned configuration for gemm 512x512x512 fp16 nn" in e.value.message
    assert tune_command_problem(e.value.hint) == (FP16, "cuda") and "--config default" in e.value.hint
    assert not (tmp_path / "absent.sqlite3").exists()  # looking does not create a cache
