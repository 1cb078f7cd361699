"""Generic choices the op interface makes for any op: which baseline `--baseline auto` runs (the first default one
whose module is installed, naming the one it stands in for), and which backend `--backend auto` picks for a problem
whose op has no CUDA kernels for its dtype (the CPU, even where a GPU is usable)."""

from __future__ import annotations

import pytest

from tracea_cli.backends.op_backend import auto_baseline
from tracea_cli.errors import UsageError
from tracea_cli.ops.base import Baseline
from tracea_cli.ops.registry import get_op
from tracea_cli.tune import setup


def _baseline(name: str, requires: str | None = None, default: bool = True) -> Baseline:
    return Baseline(name, ("cpu",), lambda problem, operands: None, default=default, requires=requires)


def test_auto_takes_the_first_default_whose_module_is_installed_and_names_the_missing_one():
    absent = _baseline("fancy", requires="tracea_no_such_module_here")
    numpy = _baseline("numpy")
    chosen, missing = auto_baseline([absent, _baseline("other", default=False), numpy])
    assert chosen is numpy and missing is absent
    installed = _baseline("np", requires="numpy")
    assert auto_baseline([installed, numpy]) == (installed, None)
    assert auto_baseline([absent]) == (absent, None)  # nothing stands in: it fails saying what is missing
    assert auto_baseline([_baseline("x", default=False)]) == (None, None)


def test_the_conv2d_auto_baseline_is_torch_where_installed_else_numpy():
    chosen, missing = auto_baseline([b for b in get_op("conv2d").baselines if "cpu" in b.backends])
    try:
        import torch  # noqa: F401
    except ImportError:
        assert chosen.name == "numpy" and missing.name == "torch"
    else:
        assert chosen.name == "torch" and missing is None


def test_auto_backend_is_the_cpu_for_a_dtype_only_the_cpu_runs_even_with_a_gpu(monkeypatch):
    monkeypatch.setattr(setup, "_cuda_usable", lambda: True)
    conv = get_op("conv2d")
    assert setup.resolve_backend("auto", conv.problem(h=8, c=4, k=4, r=3, dtype="fp64")) == "cpu"
    assert setup.resolve_backend("auto", conv.problem(h=8, c=4, k=4, r=3)) == "cuda"  # the CUDA families run fp32
    assert setup.resolve_backend("auto", conv.problem(h=8, c=4, k=4, r=3, dtype="fp16")) == "cuda"
    assert setup.resolve_backend("auto", get_op("gemm").problem(m=64)) == "cuda"


def test_a_dtype_no_backend_runs_says_which_ones_do(monkeypatch):
    monkeypatch.setattr(setup, "_cuda_usable", lambda: False)
    with pytest.raises(UsageError) as e:
        setup.resolve_backend("cpu", get_op("conv2d").problem(h=8, c=4, k=4, r=3, dtype="fp16"))
    assert e.value.message == "the cpu backend runs conv2d in fp32, fp64, not fp16."
    assert e.value.hint == "Use the cuda backend for fp16."  # the CUDA families run it
