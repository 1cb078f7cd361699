"""Which baselines an op has, and the ones bench runs itself (torch). The vendor library of a backend (cuBLAS through
CuPy, numpy's BLAS on the CPU) is the backend's own `baseline()`.

Every baseline is checked against the float64 reference before it is timed, like a tuned kernel.
"""

from __future__ import annotations

from tracea_cli.backends.base import Evaluation, Status
from tracea_cli.errors import ToolchainMissing, UsageError
from tracea_cli.ops.gemm.problem import GemmProblem, make_inputs, reference
from tracea_cli.ops.verify import check
from tracea_cli.target import Target
from tracea_cli.timing import HostClock, TimingPolicy, measure

#: baselines each op has (besides auto and none); cuDNN belongs to convolutions, SDPA to attention.
OP_BASELINES = {
    "gemm": ("cublas", "numpy", "torch"),
    "conv2d": ("cudnn", "torch"),
    "lowrank-mlp": ("cublas", "torch"),
    "attention": ("torch",),
}
#: which backend a baseline runs on; torch runs on either.
BASELINE_BACKEND = {"cublas": "cuda", "cudnn": "cuda", "numpy": "cpu"}
CHOICES = ("auto", "cublas", "cudnn", "numpy", "torch", "none")


def check_baseline(choice: str, *, ops: tuple[str, ...], backend: str | None) -> None:
    """Raise a usage error when `choice` is unknown, or absent for an op or on the backend the run uses.

    `backend=None` checks only what needs no machine (the name, the ops), so bad input fails before any work.
    """
    if choice not in CHOICES:
        raise UsageError(f"unknown baseline {choice!r}.", f"Use one of {', '.join(CHOICES)}.")
    if choice in ("auto", "none"):
        return
    for op in ops:
        have = OP_BASELINES.get(op, ())
        if choice not in have:
            raise UsageError(f"--baseline {choice} has no {op}: {op} baselines are {', '.join(have)}.", "Use --baseline auto, or one of those.")
    if backend is None:
        return
    needs = BASELINE_BACKEND.get(choice)
    if needs is not None and needs != backend:
        raise UsageError(f"--baseline {choice} runs on the {needs} backend, and this run uses {backend}.", f"Use --backend {needs}, or --baseline auto.")
    if choice == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ToolchainMissing("--baseline torch needs PyTorch, which is not installed.", "Install torch, or use --baseline auto.") from None


_TORCH_DTYPES = {"fp64": "float64", "fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_gemm(problem: GemmProblem, target: Target, *, policy: TimingPolicy, seed: int) -> tuple[str, Evaluation]:
    """torch.matmul on the target's device (TF32 allowed only for tf32); L2 flushed between samples on a GPU.

    On a GPU the inputs and the float64 reference are made there (CuPy) and handed to torch through DLPack, and the
    check runs there too: at 8192³ a host reference would take seconds."""
    import torch

    gpu = target.backend == "cuda"
    device = torch.device(f"cuda:{target.device_index or 0}") if gpu else torch.device("cpu")
    dt = getattr(torch, _TORCH_DTYPES[problem.dtype])
    if gpu:
        import cupy

        with cupy.cuda.Device(target.device_index or 0):
            inputs = make_inputs(problem, cupy.random.RandomState(seed))
            ref = reference(problem, inputs)
            cupy.cuda.get_current_stream().synchronize()
        a, b = (torch.from_dlpack(x).to(dtype=dt) for x in (inputs.a, inputs.b))
    else:
        import numpy as np

        inputs = make_inputs(problem, np.random.default_rng(seed))
        ref = reference(problem, inputs)
        a, b = (torch.from_numpy(np.ascontiguousarray(x)).to(dtype=dt) for x in (inputs.a, inputs.b))
    rhs = b if problem.layout == "nn" else b.t()
    prior = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = problem.dtype == "tf32"
    try:
        out = torch.matmul(a, rhs)
        out64 = out.to(torch.float64)
        if gpu:
            torch.cuda.synchronize(device)
            import cupy

            with cupy.cuda.Device(target.device_index or 0):
                verdict = check(cupy.from_dlpack(out64), ref, problem.dtype)
        else:
            verdict = check(out64.numpy(), ref, problem.dtype)
        if not verdict.ok:
            return "torch", Evaluation(Status.WRONG_RESULT, reason=verdict.reason, rel_error=verdict.rel_error)
        if gpu:
            l2 = (target.limits.l2_bytes if target.limits and target.limits.l2_bytes else 64 << 20)
            flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)
            from tracea_cli.backends.cuda_clock import CudaEventClock

            with torch.cuda.device(device), cupy.cuda.Device(target.device_index or 0):
                clock = CudaEventClock(cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream))
                samples = measure(lambda: torch.matmul(a, rhs, out=out), clock=clock, policy=policy, prepare=flush.zero_)
        else:
            samples = measure(lambda: torch.matmul(a, rhs, out=out), clock=HostClock(), policy=policy)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prior
    return "torch", Evaluation(Status.OK, samples=samples, rel_error=verdict.rel_error)
