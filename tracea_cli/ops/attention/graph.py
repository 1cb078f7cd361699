"""How the Python API's Graph builds an attention node: `g.attention(q, k, v, causal=True)` with q as B x H x L_q x D
and k, v as B x H_kv x L_k x D (layout="blhd": B x L x H x D), the node's value being out, of q's shape.

`g.add_attention(batch=..., heads=..., seq=..., head_dim=..., causal=...)` makes the inputs for it. The log-sum-exp
output is not a graph value (a node has one output): lse=True is refused here. The op fuses no epilogue, so pointwise
nodes after it run by themselves. `channel_axis` names V's last axis: out's channel d is Σ_j p_j·v[j, d], so a
per-channel scale of out is one of V's channels (what folding a batch norm would use, were the op to take a bias)."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.attention.problem import LAYOUTS, AttentionProblem
from tracea_cli.ops.base import GraphBinding, check_graph_keywords, graph_layout

KEYWORDS = ("causal", "layout")
REFUSED = {"lse": ("an attention node of a graph has one output, so lse=True cannot be part of it.",
                   "Call the op outside a graph for the log-sum-exp.")}


def options_from(shapes: Mapping[str, tuple[int, ...]], keywords: Mapping[str, Any]) -> dict[str, Any]:
    check_graph_keywords("attention", keywords, KEYWORDS, REFUSED)
    layout = graph_layout(keywords, LAYOUTS, "bhld")
    q, k, v = shapes["q"], shapes["k"], shapes["v"]
    axes = "B x H x L x D" if layout == "bhld" else "B x L x H x D"
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise UsageError(f"attention takes q, k and v as {axes} (layout {layout}), not shapes {q}, {k} and {v}.")
    if k != v:
        raise UsageError(f"attention's k and v must have one shape, not {k} and {v}.")
    if layout == "bhld":
        (batch, heads, seq, d), (kb, kv_heads, seq_k, kd) = q, k
    else:
        (batch, seq, heads, d), (kb, seq_k, kv_heads, kd) = q, k
    if (kb, kd) != (batch, d):
        raise UsageError(f"attention's inputs do not fit: q is {q} but k is {k} ({axes}); batch and head_dim must "
                         "agree.", "Check the layout.")
    return {"batch": batch, "heads": heads, "seq": seq, "head_dim": d, "kv_heads": kv_heads, "seq_k": seq_k,
            "causal": bool(keywords.get("causal", False)), "layout": layout}


def channel_axis(problem: AttentionProblem) -> tuple[str, int]:
    return "v", 3


GRAPH = GraphBinding(inputs=("q", "k", "v"), output="out", options_from=options_from, channel_axis=channel_axis)
