"""On a GPU: a plan runs on CuPy arrays and on CUDA torch tensors in place, on the caller's stream."""

from __future__ import annotations

import numpy as np
import pytest

import tracea

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A classification head, linear + bias, fp16: one gemm kernel with the bias epilogue."""
    pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need the cuda extra and an NVIDIA GPU)")
    from tracea_cli.backends.cuda import gpu_ready

    missing = gpu_ready(0)
    if missing:
        pytest.skip(f"no usable CUDA device: {missing}")
    rng = np.random.default_rng(1)
    w, b = rng.uniform(-1, 1, (96, 200)).astype(np.float16), rng.uniform(-1, 1, 96).astype(np.float16)
    g = tracea.Graph("fp16")
    g.linear(g.input("x", (130, 200)), w).bias(b).relu()
    plan = tracea.Context(device="cuda", cache=tmp_path_factory.mktemp("cache"), mode="default").optimize_graph(g)
    return plan, w.astype(np.float64), b.astype(np.float64), rng


def _ref(x, w, b):
    return np.maximum(x.astype(np.float64) @ w.T + b, 0)


def test_a_plan_runs_on_cupy_arrays(head):
    import cupy

    plan, w, b, rng = head
    assert [(r.op, r.epilogue) for r in plan.rows] == [("gemm", "bias_relu")]
    outs = []
    for _ in range(3):  # new inputs and outputs each call: the bound launch is moved to them, not stale
        x = rng.uniform(-1, 1, (130, 200)).astype(np.float16)
        outs.append((plan(x=cupy.asarray(x)), _ref(x, w, b)))
    for out, ref in outs:
        assert isinstance(out, cupy.ndarray) and np.linalg.norm(out.get() - ref) / np.linalg.norm(ref) < 5e-3


def test_a_plan_runs_on_torch_tensors_on_torchs_stream(head):
    torch = pytest.importorskip("torch")
    plan, w, b, rng = head
    x = torch.rand(130, 200, device="cuda", dtype=torch.float16) * 2 - 1
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = plan(x=x)
    stream.synchronize()
    ref = _ref(x.cpu().numpy(), w, b)
    assert isinstance(out, torch.Tensor) and out.is_cuda
    assert np.linalg.norm(out.float().cpu().numpy() - ref) / np.linalg.norm(ref) < 5e-3


def test_host_arrays_are_refused_on_the_cuda_backend(head):
    plan = head[0]
    with pytest.raises(tracea.UsageError, match="numpy .host. array"):
        plan(x=np.zeros((130, 200), np.float16))
