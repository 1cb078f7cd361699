"""How the Python API's Graph builds a lowrank-mlp node, and the pair of linear nodes it computes as one.

    g.lowrank_mlp(x, U, V)                 # layout nn: x M x d_in, U d_in x r, V r x d_out; its value y is M x d_out
    g.lowrank_mlp(x, U, V, layout="nt")    # U r x d_in, V d_out x r, as torch.nn.Linear stores the two weights
    g.add_lowrank_mlp(m=, d_in=, rank=, d_out=, layout=, intermediate=)   # inputs made for it

A node computes x·U·V alone: its bias, activation and residual are graph nodes after it (`.bias(b).silu().add(r)`)
that the fusion pass fuses as the op's epilogue ("bias_silu_residual"). `channel_axis` names V's output channels.

`PAIRS`: two linear nodes in a row, x → linear(W1: r x d_in) → linear(W2: d_out x r), the middle value read by the
second alone and narrow (NARROW: r ≤ min(d_in, d_out) / 2), are one lowrank-mlp node of layout nt with U = W1 and
V = W2. A bias (or anything else) between the two is not this op (x·U + b, then ·V), so the pair is left alone. The
middle is rounded to the dtype, as the two GEMMs round it (intermediate="dtype").
"""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import GraphBinding, NodePair, check_graph_keywords, graph_layout
from tracea_cli.ops.gemm.op import GemmOp
from tracea_cli.ops.lowrank_mlp.problem import INTERMEDIATES, LAYOUTS, LowrankMlpProblem

KEYWORDS = ("layout", "intermediate")
REFUSED = {name: (f"a lowrank-mlp node of a graph computes x·U·V alone, so it takes no {name}=.",
                   "Add the bias, activation and residual as graph nodes after it (.bias(b).silu().add(r)); they fuse "
                   "into it.") for name in ("bias", "act", "residual")}
NARROW = 2  # a middle of width r is narrow where NARROW * r <= min(d_in, d_out)


def options_from(shapes: Mapping[str, tuple[int, ...]], keywords: Mapping[str, Any]) -> dict[str, Any]:
    check_graph_keywords("lowrank-mlp", keywords, KEYWORDS, REFUSED)
    layout = graph_layout(keywords, LAYOUTS, "nn")
    x, u, v = shapes["x"], shapes["U"], shapes["V"]
    u_is, v_is = ("d_in x r", "r x d_out") if layout == "nn" else ("r x d_in", "d_out x r")
    if len(x) != 2 or len(u) != 2 or len(v) != 2:
        raise UsageError(f"lowrank-mlp takes x as M x d_in, U as {u_is} and V as {v_is} (layout {layout}), not "
                         f"shapes {x}, {u} and {v}.", "Give 2-D inputs (flatten batches first).")
    m, d_in = x
    u_in, rank = u if layout == "nn" else (u[1], u[0])
    v_rank, d_out = v if layout == "nn" else (v[1], v[0])
    if u_in != d_in:
        raise UsageError(f"lowrank-mlp's inputs do not fit: x is {m} x {d_in}, so U ({u_is}, layout {layout}) needs "
                         f"d_in = {d_in}, but it is {u[0]} x {u[1]}.", "Check the shapes (or the layout).")
    if v_rank != rank:
        raise UsageError(f"lowrank-mlp's inputs do not fit: U ({u_is}) is {u[0]} x {u[1]}, so V ({v_is}, layout "
                         f"{layout}) needs r = {rank}, but it is {v[0]} x {v[1]}.", "Check the shapes (or the layout).")
    out = {"m": m, "d_in": d_in, "rank": rank, "d_out": d_out, "layout": layout}
    if "intermediate" in keywords:
        if keywords["intermediate"] not in INTERMEDIATES:
            raise UsageError(f"unknown intermediate {keywords['intermediate']!r}.",
                             f"Use one of {', '.join(INTERMEDIATES)}.")
        out["intermediate"] = keywords["intermediate"]
    return out


def channel_axis(problem: LowrankMlpProblem) -> tuple[str, int]:
    """Output channel j's weights are V's column j (nn) or row j (nt): y[:, j] = T·V[:, j]."""
    return "V", 1 if problem.layout == "nn" else 0


def _linear_pair(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any] | None:
    """The options of x → linear(W1) → linear(W2) as one lowrank-mlp of layout nt, or None where it is not one: either
    node not a plain linear (layout nt, no epilogue), or a middle that is not narrow."""
    plain = all(n.get("layout") == "nt" and n.get("epilogue", "none") == "none" for n in (first, second))
    if not plain or first["m"] != second["m"] or first["n"] != second["k"]:
        return None
    m, d_in, rank, d_out = first["m"], first["k"], first["n"], second["n"]
    if NARROW * rank > min(d_in, d_out):
        return None
    return {"m": m, "d_in": d_in, "rank": rank, "d_out": d_out, "layout": "nt"}


PAIRS = (NodePair(first=GemmOp.name, second=GemmOp.name, through="A", options=_linear_pair,
                  operands={"x": (0, "A"), "U": (0, "B"), "V": (1, "B")}),)

BINDING = GraphBinding(inputs=("x", "U", "V"), output="y", options_from=options_from, channel_axis=channel_axis,
                       pairs=PAIRS)
