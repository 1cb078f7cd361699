"""The GEMM op on the CPU runtime: compile validates and describes, evaluate checks before it times, faults become
typed outcomes."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from tracea_cli.backends import cpu
from tracea_cli.backends.base import CompileFailed, Status
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.ops.gemm.families import numba as numba_family
from tracea_cli.ops.gemm.families.numba_space import hand_picked
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.ops.launch import CallStep
from tracea_cli.target import Target
from tracea_cli.timing import TimingPolicy

POLICY = TimingPolicy(warmup=1, min_samples=3, max_samples=5, target_cv=1.0, max_seconds=0.5)
TARGET = Target(backend="cpu", device_class="test cpu | 2 threads | avx512f", threads=2)
PROBLEM = GemmProblem(127, 130, 300, epilogue="bias_relu")


@pytest.fixture(scope="module")
def backend():
    return OpBackend("gemm", "cpu")


@pytest.fixture(scope="module")
def config():
    # 6x64, parallel m: the spec test_cpu_kernels and the documented example compile too (once per process)
    picks = [c for c in hand_picked(PROBLEM, TARGET) if c["mr"] == 6 and c["nr"] == 64 and c["parallel"] == "m"]
    return picks[0]


def test_compile_describes_without_building(backend, config):
    artifact = backend.compile(PROBLEM, config, TARGET)
    assert artifact.binary is None and artifact.config == config and artifact.family == "numba"
    assert '"""Tracea CPU GEMM gemm_fp32_6x64_parallel_m' in artifact.source
    assert "def micro(" in artifact.source and "vfma(" in artifact.source
    (step,) = artifact.plan.steps
    assert isinstance(step, CallStep) and step.threads == config["threads"]
    assert step.values["kc"] == config["kc"] and step.values["epilogue"] == PROBLEM.fused.code


def test_compile_rejects_configs_outside_the_space(backend, config):
    with pytest.raises(CompileFailed, match="not a multiple of mr=6"):
        backend.compile(PROBLEM, {**config, "mc": 64}, TARGET)
    with pytest.raises(CompileFailed, match="fp32 and fp64"):
        backend.compile(GemmProblem(64, 64, 64, dtype="bf16"), config, TARGET)


def test_source_hash_is_the_generator_module(backend):
    text = Path(numba_family.__file__).read_text()
    one = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert backend.source_hash(PROBLEM) == hashlib.sha256(one.encode()).hexdigest()[:16]
    assert backend.source_hash(GemmProblem(64, 64, 64, dtype="fp64")) == backend.source_hash(PROBLEM)


def test_evaluate_checks_then_times(backend, config):
    ev = backend.evaluate(backend.compile(PROBLEM, config, TARGET), PROBLEM, TARGET, policy=POLICY, seed=5)
    assert ev.status is Status.OK, ev.reason
    assert 0 < ev.rel_error <= 1e-5
    assert ev.samples is not None and POLICY.min_samples <= ev.samples.n <= POLICY.max_samples
    assert all(t > 0 for t in ev.samples.times_ms)
    assert ev.compile_s >= 0


@pytest.mark.parametrize("problem", [PROBLEM, GemmProblem(33, 17, 70, dtype="fp64", layout="nt", epilogue="bias_silu")],
                         ids=["fp32-bias-relu", "fp64-nt-bias-silu"])
def test_the_ymm_kernels_of_an_avx2_target_compute_what_the_reference_does(backend, problem):
    """An AVX2 target's configurations use 32-byte vectors (ymm runs on this machine's AVX-512 too), each checked
    against the float64 reference on ragged sizes before it is timed."""
    avx2 = Target(backend="cpu", device_class="test cpu | 2 threads | avx2", threads=2)
    config = hand_picked(problem, avx2)[0]
    artifact = backend.compile(problem, config, avx2)
    assert config["vector"] == 32 and "_ymm" in artifact.source.splitlines()[0]
    ev = backend.evaluate(artifact, problem, avx2, policy=POLICY, seed=3)
    assert ev.status is Status.OK, ev.reason
    assert ev.rel_error <= (1e-5 if problem.dtype == "fp32" else 1e-12)


def test_baseline_is_numpy_on_the_same_problem(backend):
    name, ev = backend.baseline(PROBLEM, TARGET, policy=POLICY, seed=5)
    assert name == "numpy" and ev.status is Status.OK, ev.reason
    assert ev.rel_error <= 1e-5 and ev.samples.n >= POLICY.min_samples


def test_an_unknown_baseline_is_a_failed_evaluation(backend):
    name, ev = backend.baseline(PROBLEM, TARGET, policy=POLICY, seed=5, name="cublas")
    assert ev.status is Status.LAUNCH_ERROR and "no cublas baseline on cpu" in ev.reason


def test_any_integer_seed_is_accepted(backend):
    name, ev = backend.baseline(GemmProblem(20, 30, 40), TARGET, policy=POLICY, seed=-1)
    assert ev.status is Status.OK, ev.reason


@pytest.mark.parametrize("epilogue", ["bias_silu", "bias_gelu", "bias_residual"])
def test_baseline_does_each_epilogue(backend, epilogue):
    name, ev = backend.baseline(GemmProblem(33, 40, 50, layout="nt", epilogue=epilogue), TARGET, policy=POLICY, seed=1)
    assert ev.status is Status.OK, ev.reason


def _kernel(mode):
    """Stands in for the compiled entry's call: leaves C as it is (NaN), scribbles on it, or raises."""

    def run(entry, step, values):
        if mode == "raise":
            raise RuntimeError("simulated fault")
        if mode == "zeros":
            values["C"][...] = 0

    return run


@pytest.mark.parametrize("mode,status", [("nothing", Status.WRONG_RESULT), ("zeros", Status.WRONG_RESULT),
                                         ("raise", Status.LAUNCH_ERROR)])
def test_kernel_faults_become_typed_outcomes_and_are_never_timed(backend, config, monkeypatch, mode, status):
    monkeypatch.setattr(cpu, "call", _kernel(mode))
    ev = backend.evaluate(backend.compile(PROBLEM, config, TARGET), PROBLEM, TARGET, policy=POLICY, seed=2)
    assert ev.status is status and ev.samples is None and ev.reason
    if mode == "nothing":
        assert "NaN" in ev.reason


def test_a_kernel_that_does_not_compile_is_a_compile_error(backend, config):
    artifact = backend.compile(PROBLEM, config, TARGET)
    broken = artifact.source.replace("def micro(", "def micro(undefined_name + ", 1)
    from dataclasses import replace

    ev = backend.evaluate(replace(artifact, source=broken), PROBLEM, TARGET, policy=POLICY, seed=2)
    assert ev.status is Status.COMPILE_ERROR and "SyntaxError" in ev.reason


def test_evaluate_uses_fresh_inputs_per_seed(backend, config):
    a = backend.evaluate(backend.compile(PROBLEM, config, TARGET), PROBLEM, TARGET, policy=POLICY, seed=1)
    b = backend.evaluate(backend.compile(PROBLEM, config, TARGET), PROBLEM, TARGET, policy=POLICY, seed=2)
    assert a.ok and b.ok and a.rel_error != b.rel_error
    assert np.isfinite([a.rel_error, b.rel_error]).all()
