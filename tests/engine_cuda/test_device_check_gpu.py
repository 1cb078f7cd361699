"""On a GPU: inputs made on the device, their cuBLAS DGEMM reference and the check there agree with the host path
(numpy) that the correctness policy was first written against. Marked `gpu`."""

from __future__ import annotations

import numpy as np
import pytest

from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.gemm.problem import GemmProblem, make_inputs, reference
from tracea_cli.ops.verify import check

pytestmark = pytest.mark.gpu


def _host(inputs: dict) -> dict:
    """The same inputs copied to the host (numpy), by tensor name."""
    return {name: x.get() for name, x in inputs.items()}


@pytest.mark.parametrize("dtype", ["fp64", "fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("epilogue", ["none", "bias_gelu", "bias_residual"])
def test_device_reference_equals_the_host_reference(gpu_target, dtype, epilogue):
    import cupy

    problem = GemmProblem(127, 1000, 17, dtype, "nt", epilogue)
    inputs = make_inputs(problem, cupy.random.RandomState(3))
    assert set(inputs) == {t.name for t in problem.tensors() if not t.output}
    assert all(isinstance(x, cupy.ndarray) for x in inputs.values())
    host = _host(inputs)
    for a in host.values():
        assert np.all(from_storage(to_storage(a, dtype), dtype) == a)  # already representable
    assert np.count_nonzero(host["A"]) == host["A"].size and np.abs(host["A"]).max() <= 1.0
    ref = reference(problem, inputs)["C"]
    assert isinstance(ref, cupy.ndarray)
    expected = reference(problem, host)["C"]
    assert np.linalg.norm(ref.get() - expected) <= 1e-13 * np.linalg.norm(expected)


def test_device_check_passes_good_output_and_fails_nan_and_wrong(gpu_target):
    import cupy

    problem = GemmProblem(1000, 1023, 127, "fp16")
    inputs = make_inputs(problem, cupy.random.RandomState(5))
    ref = reference(problem, inputs)["C"]
    good = from_storage(to_storage(ref, "fp16"), "fp16")
    assert check(good, ref, "fp16").ok
    poisoned = good.copy()
    poisoned[999, 1022] = cupy.nan
    verdict = check(poisoned, ref, "fp16")
    assert not verdict.ok and "NaN" in verdict.reason
    assert not check(good * 1.01, ref, "fp16").ok
