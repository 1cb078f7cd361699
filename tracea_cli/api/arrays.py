"""The caller's arrays as the backends take them, without copies: numpy on the cpu backend, CuPy on cuda; torch
tensors on either through their own memory (numpy views, DLPack). bf16 travels as its 16-bit patterns.

A wrong device, dtype, shape or layout is a UsageError naming the tensor: a kernel never sees an array it would
read wrongly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracea_cli.backends.checked import storage_dtype
from tracea_cli.errors import UsageError

TORCH_DTYPES = {"fp32": "float32", "fp64": "float64", "fp16": "float16", "bf16": "bfloat16"}


def is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _is_cupy(a: Any) -> bool:
    return type(a).__module__.startswith("cupy")


def storage_view(t: Any) -> Any:
    """A torch tensor's memory as the backend's array in storage format (numpy on the host, CuPy on a GPU; bf16 as
    uint16 bit patterns), without a copy."""
    import torch

    t = t.detach()
    bf16 = t.dtype == torch.bfloat16
    if bf16:
        t = t.view(torch.int16)
    if t.device.type == "cuda":
        import cupy

        out = cupy.from_dlpack(t)
    else:
        out = t.numpy()
    return out.view(np.uint16) if bf16 else out


def native(a: Any, *, backend: str, dtype: str, shape: tuple[int, ...], what: str) -> Any:
    """`a` as the backend's array (a view of the same memory), checked against the dtype and shape it must have."""
    if is_torch(a):
        want = TORCH_DTYPES[dtype]
        if str(a.dtype) != f"torch.{want}":
            raise UsageError(f"{what} is {str(a.dtype).removeprefix('torch.')}, but the graph says {dtype} ({want}).")
        on_gpu = a.device.type == "cuda"
        if on_gpu != (backend == "cuda"):
            raise UsageError(f"{what} is on {a.device}, but the plan runs on the {backend} backend.",
                             "Move it (.cuda() / .cpu()) or make the plan with another Context.")
        out = storage_view(a)
    elif _is_cupy(a):
        if backend != "cuda":
            raise UsageError(f"{what} is a CuPy (GPU) array, but the plan runs on the {backend} backend.")
        out = a
    elif isinstance(a, np.ndarray):
        if backend != "cpu":
            raise UsageError(f"{what} is a numpy (host) array, but the plan runs on the {backend} backend.",
                             "Pass a CuPy array or a CUDA torch tensor.")
        out = a
    else:
        raise UsageError(f"{what} is a {type(a).__name__}, not a numpy, CuPy or torch array.")
    want_np = storage_dtype(dtype)
    if out.dtype != want_np:
        shown = "uint16 bf16 bit patterns" if dtype == "bf16" else str(want_np)
        raise UsageError(f"{what} is {out.dtype}, but the graph says {dtype} ({shown}).")
    if tuple(out.shape) != tuple(shape):
        raise UsageError(f"{what} has shape {tuple(out.shape)}, but the graph says {tuple(shape)}.")
    if not out.flags.c_contiguous:
        raise UsageError(f"{what} is not contiguous in the graph's layout (row-major, channels last).",
                         "Pass a contiguous array (for torch NCHW images: channels_last memory, permuted to NHWC).")
    return out


def as_torch(a: Any, dtype: str) -> Any:
    """A backend array as a torch tensor over the same memory."""
    import torch

    if dtype == "bf16":
        a = a.view(np.int16)  # torch takes no uint16 from numpy or DLPack
    t = torch.from_numpy(a) if isinstance(a, np.ndarray) else torch.from_dlpack(a)
    return t.view(torch.bfloat16) if dtype == "bf16" else t
