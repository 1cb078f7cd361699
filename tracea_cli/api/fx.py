"""`Graph.from_fx`: a torch.fx.GraphModule (or an nn.Module, traced) as a Graph.

Placeholders become inputs (4-D ones channels last: the graph's layout; the plan takes x.permute(0, 2, 3, 1) of a
channels_last tensor), parameters constants. Conv2d (groups 1, zeros padding, numeric padding), Linear (2-D input),
BatchNorm2d (inference), ReLU, SiLU, GELU (erf form) and `+` / torch.add become graph nodes; anything else a fallback
node that calls the module's own code on torch tensors (and lays its result out as the graph's).
"""

from __future__ import annotations

import operator
from typing import Any

from tracea_cli.api.arrays import TORCH_DTYPES, as_torch
from tracea_cli.errors import UsageError

_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


def _dtype_of(t: Any) -> str:
    name = str(t.dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise UsageError(f"from_fx: a tensor of dtype {name} cannot be in a graph.", "Use float32, float16 or bfloat16.")
    return _DTYPES[name]


def graph_from_fx(graph_type: type, gm: Any, example_inputs: Any, *, dtype: str | None) -> Any:
    try:
        import torch
        import torch.fx
    except ImportError:
        raise UsageError("Graph.from_fx needs torch, which is not installed.", "Install PyTorch.") from None
    if not isinstance(gm, torch.fx.GraphModule):
        if not isinstance(gm, torch.nn.Module):
            raise UsageError(f"Graph.from_fx takes a torch.fx.GraphModule or nn.Module, not {type(gm).__name__}.")
        gm = torch.fx.symbolic_trace(gm)
    examples = list(example_inputs) if isinstance(example_inputs, (list, tuple)) else \
        ([example_inputs] if example_inputs is not None else [])
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(examples) != len(placeholders):
        raise UsageError(f"Graph.from_fx needs one example input per input of the module ({len(placeholders)}), "
                         f"got {len(examples)}.", "Pass example_inputs=(x, ...) with the shapes the plan will run.")
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(gm).propagate(*examples)
    g = graph_type(dtype or _dtype_of(examples[0]))
    values: dict[str, Any] = {}
    modules = dict(gm.named_modules())

    def nhwc(shape: Any) -> tuple[int, ...]:
        shape = tuple(int(d) for d in shape)
        return (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else shape

    def const(name: str, t: Any) -> Any:
        return g.constant(name, t.detach())

    for node in gm.graph.nodes:
        meta = node.meta.get("tensor_meta")
        if node.op == "placeholder":
            values[node.name] = g.input(node.name, nhwc(meta.shape), _dtype_of(meta))
            continue
        if node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            g.output(*(values[o.name] for o in outs))
            continue
        args = [values.get(a.name) if isinstance(a, torch.fx.Node) else a for a in node.args]
        made = None
        if node.op == "call_module":
            m = modules[node.target]
            made = _module_node(g, torch, m, node.name, args, const)
        elif node.op == "call_function" and node.target in (torch.add, operator.add) and \
                len(args) == 2 and all(hasattr(a, "graph") for a in args) and args[0].shape == args[1].shape:
            made = g.add(args[0], args[1], name=node.name)
        elif node.op == "call_function" and node.target in (torch.relu, torch.nn.functional.relu):
            made = g.relu(args[0], name=node.name)
        if made is None:
            made = _fallback(g, torch, gm, node, args, meta, nhwc)
        values[node.name] = made
    return g


def _op_for(module: Any) -> Any:
    """The registry's op that computes this torch module (its GraphBinding names the module class), or None."""
    from tracea_cli.ops.registry import get_op, op_names

    for name in op_names():
        binding = getattr(get_op(name), "graph", None)
        if binding is not None and binding.torch_module == type(module).__name__:
            return get_op(name)
    return None


def _module_node(g: Any, torch: Any, m: Any, name: str, args: list, const: Any) -> Any:
    x = args[0] if args else None
    if x is None or not hasattr(x, "graph") or len(args) != 1:
        return None
    op = _op_for(m)
    if op is not None:
        read = op.graph.from_torch(m)
        if isinstance(read, str):
            return None
        keywords, weights, bias = read
        tensors = [x, *(const(f"{name}.{role}", weights[role]) for role in op.graph.inputs[1:])]
        try:
            y = g.op(op.name, *tensors, name=name, **keywords)
        except UsageError:  # a shape the op does not take (a 3-D input to Linear): torch runs it
            return None
        return y.bias(const(f"{name}.bias", bias), name=f"{name}.add_bias") if bias is not None else y
    if isinstance(m, torch.nn.BatchNorm2d) and not m.training and m.track_running_stats:
        return g.batch_norm(x, const(f"{name}.mean", m.running_mean), const(f"{name}.var", m.running_var),
                            const(f"{name}.weight", m.weight) if m.affine else None,
                            const(f"{name}.bias", m.bias) if m.affine else None, eps=m.eps, name=name)
    kinds = {torch.nn.ReLU: "relu", torch.nn.SiLU: "silu"}
    if type(m) in kinds:
        return g.activation(kinds[type(m)], x, name=name)
    if isinstance(m, torch.nn.GELU) and m.approximate == "none":
        return g.activation("gelu", x, name=name)
    return None


def _fallback(g: Any, torch: Any, gm: Any, node: Any, args: list, meta: Any, nhwc: Any) -> Any:
    """A node that runs the fx node's own code on torch tensors, in torch's layout, and returns the graph's."""
    if meta is None or not hasattr(meta, "shape"):
        raise UsageError(f"from_fx: node {node.name!r} ({node.op} {node.target}) does not make one tensor, which a "
                         "graph cannot hold.", "Trace a module whose nodes each make one tensor.")
    inputs = [a for a in args if hasattr(a, "graph")]
    positions = [i for i, a in enumerate(args) if hasattr(a, "graph")]
    dtypes = [a.dtype for a in inputs]
    modules = dict(gm.named_modules())

    def run(*arrays: Any) -> Any:
        call = list(node.args)
        for i, a, d in zip(positions, arrays, dtypes):
            t = as_torch(a, d)
            call[i] = t.permute(0, 3, 1, 2) if t.dim() == 4 else t
        if node.op == "call_module":
            out = modules[node.target](*call, **node.kwargs)
        elif node.op == "call_function":
            out = node.target(*call, **node.kwargs)
        elif node.op == "call_method":
            out = getattr(call[0], node.target)(*call[1:], **node.kwargs)
        else:
            out = getattr(gm, node.target)
        out = out.permute(0, 2, 3, 1) if out.dim() == 4 else out
        out = out.contiguous()
        from tracea_cli.api.arrays import native

        backend = "cuda" if out.device.type == "cuda" else "cpu"
        return native(out, backend=backend, dtype=_dtype_of(out), shape=tuple(out.shape), what=f"node {node.name!r}")

    return g.fallback(run, *inputs, shape=nhwc(meta.shape), dtype=_dtype_of(meta), name=node.name)
