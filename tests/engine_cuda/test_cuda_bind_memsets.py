"""The CUDA backend's `bind` follows a plan's memsets as ops/launch.py's MemsetStep says, on this machine without a
GPU: CuPy's allocation and memset and the driver's launch are stand-ins that record what they were asked (the code
under test, `bind` and the plans, is the real one). A per-call memset is queued before the kernels on every call; one
marked `once` (conv2d's serial split-K) zeroes the workspace when bind allocates it, on the launch's stream, and
never again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tracea_cli.backends import cuda
from tracea_cli.backends.base import Artifact
from tracea_cli.ops.conv2d.families.implicit_gemm import conv2d_args, conv2d_launch
from tracea_cli.ops.conv2d.problem import Conv2dProblem

STREAM = 0x5000
CONFIG = {"family": "mma", "block_m": 32, "block_n": 64, "block_k": 32, "warp_m": 16, "warp_n": 32, "stages": 3,
          "vec": 8, "iterator": "optimized", "split_k": 4, "group_m": 1}


class _Memory:
    def __init__(self, nbytes: int, at: int) -> None:
        self.nbytes, self.data = nbytes, SimpleNamespace(ptr=at)


@pytest.fixture
def recorded(monkeypatch):
    events: list[tuple] = []
    fake_cupy = SimpleNamespace(
        empty=lambda n, dtype: (events.append(("alloc", int(n))), _Memory(int(n), 0x10000))[1],
        cuda=SimpleNamespace(get_current_stream=lambda: SimpleNamespace(ptr=STREAM),
                             runtime=SimpleNamespace(memsetAsync=lambda ptr, value, n, stream: events.append(
                                 ("memset", ptr, value, n, stream)))))
    fake_driver = SimpleNamespace(CUstream=lambda ptr: ptr)

    def launch(function, *rest):
        events.append(("launch", function.value))
        return 0

    monkeypatch.setattr(cuda, "_cupy", lambda: fake_cupy)
    monkeypatch.setattr(cuda, "_driver", lambda: fake_driver)
    monkeypatch.setattr(cuda, "_raw_launch", lambda: launch)
    return events


def _bound(mode: str):
    problem = Conv2dProblem(1, 7, 7, 512, 512, 3, 3, 1, 1, 1, 1, dtype="fp16", epilogue="bias_relu")
    config = {**CONFIG, "splitk_mode": mode}
    plan = conv2d_launch(problem, config)
    loaded = cuda.LoadedModule(Artifact(config=config, family="mma", source="", plan=plan), None,
                               {k.name: 0x100 + i for i, k in enumerate(plan.kernels)}, {})
    operands = {n: _Memory(8, 0x20000 + 0x1000 * i) for i, n in enumerate(("X", "W", "Y", "bias"))}
    names = {v: k for k, v in loaded.functions.items()}
    return cuda.bind(loaded, conv2d_args(problem, operands)), plan, names, 49 * 512


def test_a_once_memset_zeroes_the_workspace_at_allocation_and_never_per_call(recorded):
    bound, plan, names, mn = _bound("serial")
    workspace = plan.workspace_bytes({"M": 49, "N": 512, "K": 4608})
    assert recorded == [("alloc", workspace), ("memset", 0x10000, 0, 8 * mn, STREAM)]
    recorded.clear()
    for _ in range(3):
        bound()
    assert [e[0] for e in recorded] == ["launch"] * 3 and {names[e[1]] for e in recorded} == {"conv2d_main"}


def test_a_per_call_memset_runs_before_the_kernels_on_every_call(recorded):
    bound, _, names, mn = _bound("reduce")
    assert [e[0] for e in recorded] == ["alloc"]
    recorded.clear()
    bound()
    bound()
    shown = [e[0] if e[0] == "memset" else names[e[1]] for e in recorded]
    assert shown == ["memset", "conv2d_main", "conv2d_splitk_reduce"] * 2
    assert recorded[0] == ("memset", 0x10000, 0, 4 * mn, STREAM)

