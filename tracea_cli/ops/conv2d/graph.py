"""How the Python API's Graph builds a conv2d node: `g.conv2d(x, w, stride=1, padding=1)` with x as N x H x W x C and
w as K x R x S x C (the op's own layouts; `Graph.from_fx` and `patch_conv2d` translate torch's)."""

from __future__ import annotations

from typing import Any, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import GraphBinding
from tracea_cli.ops.conv2d.problem import Conv2dProblem

# builder keyword -> the problem fields it sets; an int sets both axes, a pair (h, w) one each
_GEOMETRY = {"stride": ("stride_h", "stride_w"), "padding": ("pad_h", "pad_w"), "pad": ("pad_h", "pad_w"),
             "dilation": ("dilation_h", "dilation_w")}


def options_from(shapes: Mapping[str, tuple[int, ...]], keywords: Mapping[str, Any]) -> dict[str, Any]:
    x, w = shapes["X"], shapes["W"]
    if len(x) != 4 or len(w) != 4:
        raise UsageError(f"conv2d takes x as N x H x W x C and w as K x R x S x C, not shapes {x} and {w}.")
    if x[3] != w[3]:
        raise UsageError(f"conv2d's inputs do not fit: x has {x[3]} channels (N x H x W x C = {x}) but w has {w[3]} "
                         f"(K x R x S x C = {w}).", "Check the layouts: the Graph takes channels last.")
    out: dict[str, Any] = dict(zip(("n", "h", "w", "c"), x)) | dict(zip(("k", "r", "s"), w[:3]))
    for name, value in keywords.items():
        if name == "groups":
            out["groups"] = value
            continue
        if name not in _GEOMETRY:
            raise UsageError(f"conv2d has no keyword {name!r}.", "Use stride, padding, dilation or groups.")
        pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
        if len(pair) != 2:
            raise UsageError(f"conv2d's {name} is one number or a pair (h, w), not {value!r}.")
        out.update(zip(_GEOMETRY[name], pair))
    return out


def channel_axis(problem: Conv2dProblem) -> tuple[str, int]:
    return "W", 0


def from_torch(module: Any) -> tuple[dict[str, Any], dict[str, Any], Any] | str:
    """A torch.nn.Conv2d as (keywords, {"W": its K x R x S x C filter}, its bias), or why it is not one we run."""
    if module.groups != 1:
        return f"groups={module.groups} (only 1 is routed)"
    if module.padding_mode != "zeros":
        return f"padding_mode={module.padding_mode!r} (only zeros is routed)"
    if isinstance(module.padding, str):
        return f"padding={module.padding!r} (only numbers are routed)"
    keywords = {"stride": tuple(module.stride), "padding": tuple(module.padding), "dilation": tuple(module.dilation)}
    return keywords, {"W": module.weight.detach().permute(0, 2, 3, 1).contiguous()}, module.bias


BINDING = GraphBinding(inputs=("X", "W"), output="Y", options_from=options_from, channel_axis=channel_axis,
                       torch_module="Conv2d", from_torch=from_torch)
