"""Operands as torch tensors, for the baselines that call torch (GEMM's torch.matmul, conv2d's cuDNN and CPU conv):
torch imported when a baseline is prepared, arrays viewed without a copy."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracea_cli.errors import ToolchainMissing


def require_torch(hint: str) -> Any:
    """The torch module, or ToolchainMissing with `hint` when it is not installed."""
    try:
        import torch
    except ImportError:
        raise ToolchainMissing("this baseline needs PyTorch, which is not installed.", hint) from None
    return torch


def as_torch(torch: Any, array: Any, dtype: str) -> Any:
    """A torch tensor sharing the array's memory (DLPack on a GPU, from_numpy on the host); bf16 bit patterns viewed
    as bfloat16."""
    t = torch.from_numpy(array) if isinstance(array, np.ndarray) else torch.from_dlpack(array)
    return t.view(torch.bfloat16) if dtype == "bf16" else t
