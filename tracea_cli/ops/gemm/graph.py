"""How the Python API's Graph builds a GEMM node: `g.gemm(a, b)` (B as K x N), `g.linear(x, w)` (w as torch.nn.Linear
stores it, N x K)."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import GraphBinding
from tracea_cli.ops.gemm.problem import GemmProblem


def options_from(shapes: Mapping[str, tuple[int, ...]], keywords: Mapping[str, Any]) -> dict[str, Any]:
    layout = keywords.get("layout", "nn")
    a, b = shapes["A"], shapes["B"]
    if len(a) != 2 or len(b) != 2:
        raise UsageError(f"gemm multiplies matrices, not shapes {a} and {b}.", "Give 2-D inputs (flatten batches first).")
    m, k = a
    n, kb = (b[1], b[0]) if layout == "nn" else b
    if kb != k:
        b_is = "K x N" if layout == "nn" else "N x K"
        raise UsageError(f"gemm's inputs do not fit: A is {m} x {k}, so B ({b_is}, layout {layout}) needs {k} for K, "
                         f"but it is {b[0]} x {b[1]}.", "Check the shapes (or the layout).")
    return {"m": m, "n": n, "k": k, "layout": layout}


def channel_axis(problem: GemmProblem) -> tuple[str, int]:
    return "B", 1 if problem.layout == "nn" else 0


def from_torch(module: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """A torch.nn.Linear: its weight (out x in) is B in layout nt."""
    return {"layout": "nt"}, {"B": module.weight.detach()}, module.bias


BINDING = GraphBinding(inputs=("A", "B"), output="C", options_from=options_from, channel_axis=channel_axis,
                       aliases={"linear": {"layout": "nt"}}, torch_module="Linear", from_torch=from_torch)
