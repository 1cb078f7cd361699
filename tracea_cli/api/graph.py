"""The Python API's graph: a small IR of tensors (values) made by nodes, appended in order and never changed.

    g = Graph()
    x = g.input("x", (32, 56, 56, 64), dtype="fp16")          # the ops' own layouts: channels last
    w = g.constant("w", weights)                               # an array: its shape and dtype are the value's
    y = g.conv2d(x, w, stride=1, padding=1).bias(b).relu().add(r)
    g.add_gemm(m=2048, n=2048, k=2048)                         # sizes only: the inputs are made for it

Op nodes come from the registry: `g.<op>(tensors..., **keywords)` builds one from its inputs (the op's
`GraphBinding` turns their shapes into the problem's options) and `g.add_<op>(**options)` from option values (its
inputs become graph inputs named after the node). Pointwise nodes (bias, relu, silu, gelu, add) and batch norm are
the graph's own: `optimize_graph` folds them into an op's epilogue where the op has one that matches. A `fallback`
node runs a Python function (what `Graph.from_fx` keeps of a torch module it does not know).

Every builder checks what it is given (shapes that do not fit, dtypes that differ, a value of another graph) and
raises a UsageError naming the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tracea_cli.errors import UsageError
from tracea_cli.ops.base import ACTIVATIONS, GraphBinding, Op
from tracea_cli.ops.dtypes import DTYPES
from tracea_cli.ops.registry import get_op, op_names

POINTWISE = ("bias", *ACTIVATIONS, "add")
KINDS = ("input", "constant", "op", *POINTWISE, "batch_norm", "fallback")


@dataclass(frozen=True)
class Node:
    """One node. `inputs` are the indices of the nodes whose values it reads; `roles` names each input's part (an
    op's tensor name, "bias" of a bias, "mean" of a batch norm, ...). `options` are an op node's option values (or a
    batch norm's eps); `value` a constant's array; `fn` a fallback's function."""

    index: int
    kind: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    inputs: tuple[int, ...] = ()
    roles: tuple[str, ...] = ()
    op: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    value: Any = field(default=None, compare=False, repr=False)
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        return f"node {self.index} ({self.name})"

    def input_for(self, role: str) -> int | None:
        return dict(zip(self.roles, self.inputs)).get(role)


@dataclass(frozen=True)
class Value:
    """A tensor of a graph: what a builder returns. Its methods append the pointwise nodes that read it."""

    graph: Graph = field(compare=False, repr=False)
    index: int

    @property
    def node(self) -> Node:
        return self.graph.nodes[self.index]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> str:
        return self.node.dtype

    def bias(self, b: Value | Any, *, name: str | None = None) -> Value:
        return self.graph.bias(self, b, name=name)

    def relu(self, *, name: str | None = None) -> Value:
        return self.graph.activation("relu", self, name=name)

    def silu(self, *, name: str | None = None) -> Value:
        return self.graph.activation("silu", self, name=name)

    def gelu(self, *, name: str | None = None) -> Value:
        return self.graph.activation("gelu", self, name=name)

    def add(self, other: Value | Any, *, name: str | None = None) -> Value:
        return self.graph.add(self, other, name=name)

    def batch_norm(self, mean: Any, var: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5,
                   name: str | None = None) -> Value:
        return self.graph.batch_norm(self, mean, var, weight, bias, eps=eps, name=name)


def _array_shape_dtype(array: Any) -> tuple[tuple[int, ...], str]:
    """The shape and Tracea dtype of a numpy, CuPy or torch array."""
    shape = tuple(int(d) for d in array.shape)
    text = str(array.dtype).removeprefix("torch.")
    names = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}
    if text not in names:
        raise UsageError(f"an array of dtype {text} cannot be a graph constant.", "Use float32, float64, float16 or bfloat16.")
    return shape, names[text]


def _binding(op: Op) -> GraphBinding | None:
    """The op's GraphBinding; None for an op not (yet) in graphs, a plug-in's older op without the attribute too."""
    return getattr(op, "graph", None)


def _op_attr(name: str) -> tuple[str, str] | None:
    """("op"|"add", op name) for a builder name that an op of the registry answers: `conv2d`, `add_gemm`, `linear`."""
    for op_name in op_names():
        ident = op_name.replace("-", "_")
        if name == ident:
            return "op", op_name
        if name == f"add_{ident}":
            return "add", op_name
    for op_name in op_names():
        binding = _binding(get_op(op_name))
        if binding is not None and name in binding.aliases:
            return "op", op_name
    return None


def _node_problem(op: Op, label: str, options: Mapping[str, Any], dtype: str) -> Any:
    """The problem an op node computes: its main product alone (epilogue "none"; the fusion pass names the epilogue
    from the pointwise nodes after it). UsageErrors name the node."""
    if "epilogue" in options:
        raise UsageError(f"{op.name} node {label!r}: a graph's op node takes no epilogue=.",
                         "Add the bias, activation and residual as graph nodes after it (.bias(b).relu().add(r)); "
                         "they fuse into it.")
    try:
        return op.problem(**options, dtype=dtype, epilogue="none")
    except UsageError as e:
        raise UsageError(f"{op.name} node {label!r}: {e.message}", e.hint) from None


class Graph:
    """An append-only graph: builders add nodes and return their values; nodes never change once added."""

    def __init__(self, dtype: str = "fp32") -> None:
        if dtype not in DTYPES:
            raise UsageError(f"unknown dtype {dtype!r}.", f"Use one of {', '.join(DTYPES)}.")
        self.dtype = dtype  # what inputs made by `add_<op>` and `input` without a dtype hold
        self._nodes: tuple[Node, ...] = ()
        self._outputs: tuple[int, ...] = ()

    # ---- reading -------------------------------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self._nodes

    @property
    def outputs(self) -> tuple[int, ...]:
        """The nodes whose values a plan returns: those marked with `output`, else every value nobody reads."""
        if self._outputs:
            return self._outputs
        read = {i for n in self._nodes for i in n.inputs}
        return tuple(n.index for n in self._nodes if n.index not in read and n.kind not in ("input", "constant"))

    def consumers(self, index: int) -> tuple[int, ...]:
        return tuple(n.index for n in self._nodes if index in n.inputs)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"Graph({len(self._nodes)} nodes, outputs {list(self.outputs)})"

    # ---- building --------------------------------------------------------------------------------------------------

    def _append(self, kind: str, name: str | None, shape: tuple[int, ...], dtype: str, **fields: Any) -> Value:
        index = len(self._nodes)
        node = Node(index, kind, name or f"{fields.get('op') or kind}{index}", tuple(shape), dtype, **fields)
        if any(n.name == node.name for n in self._nodes):
            raise UsageError(f"the graph already has a node named {node.name!r}.", "Give each node its own name.")
        self._nodes = (*self._nodes, node)
        return Value(self, index)

    def _value(self, v: Any, what: str, *, name: str) -> Value:
        """`v` as a value of this graph: a Value of it, or an array made a constant named after its use."""
        if isinstance(v, Value):
            if v.graph is not self:
                raise UsageError(f"the {what} of {name!r} is a value of another graph.", "Build each graph from its own values.")
            return v
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return self.constant(f"{name}.{what}", v)
        raise UsageError(f"the {what} of {name!r} must be a graph value or an array, not {type(v).__name__}.")

    def input(self, name: str, shape: tuple[int, ...], dtype: str | None = None) -> Value:
        """A tensor given when the plan runs (`plan(name=array)`)."""
        dtype = dtype or self.dtype
        if dtype not in DTYPES:
            raise UsageError(f"unknown dtype {dtype!r} for input {name!r}.", f"Use one of {', '.join(DTYPES)}.")
        if not shape or any(not isinstance(d, int) or d < 1 for d in shape):
            raise UsageError(f"input {name!r} needs a shape of positive whole numbers, not {shape!r}.")
        return self._append("input", name, tuple(shape), dtype)

    def constant(self, name: str, array: Any) -> Value:
        """A tensor whose value is known now (weights): kept by reference, read when the plan is made and runs."""
        shape, dtype = _array_shape_dtype(array)
        return self._append("constant", name, shape, dtype, value=array)

    def op(self, op_name: str, *tensors: Value | Any, name: str | None = None, **keywords: Any) -> Value:
        """A node of op `op_name` over its input tensors (in the order of its GraphBinding), keywords as it takes."""
        op: Op = get_op(op_name)
        if _binding(op) is None:
            raise UsageError(f"the {op_name} op cannot be part of a graph yet.")
        label = name or f"{op_name}{len(self._nodes)}"
        if len(tensors) != len(op.graph.inputs):
            raise UsageError(f"{op_name} node {label!r} takes {len(op.graph.inputs)} tensors "
                             f"({', '.join(op.graph.inputs)}), not {len(tensors)}.")
        values = [self._value(t, role, name=label) for t, role in zip(tensors, op.graph.inputs)]
        dtypes = {v.dtype for v in values}
        if len(dtypes) > 1:
            raise UsageError(f"{op_name} node {label!r} mixes dtypes {', '.join(sorted(dtypes))}.", "Give inputs of one dtype.")
        shapes = {role: v.shape for role, v in zip(op.graph.inputs, values)}
        options = op.graph.options_from(shapes, keywords)
        return self._op_node(op, label, values, options, dtypes.pop(), explicit=name is not None)

    def _op_node(self, op: Op, label: str, values: list[Value], options: Mapping[str, Any], dtype: str, *,
                 explicit: bool) -> Value:
        problem = _node_problem(op, label, options, dtype)
        tensors = {t.name: t for t in op.tensors(problem)}
        for role, v in zip(op.graph.inputs, values):
            if tensors[role].shape != v.shape:
                raise UsageError(f"{op.name} node {label!r}: its {role} is {v.shape}, but the problem needs "
                                 f"{tensors[role].shape}.")
        out = tensors[op.graph.output]
        return self._append("op", label if explicit else None, out.shape, dtype, op=op.name,
                            inputs=tuple(v.index for v in values), roles=op.graph.inputs,
                            options=tuple(sorted(options.items())))

    def add_op(self, op_name: str, *, name: str | None = None, dtype: str | None = None, **options: Any) -> Value:
        """A node of op `op_name` from its option values; its inputs become graph inputs `NAME.TENSOR`."""
        op: Op = get_op(op_name)
        if _binding(op) is None:
            raise UsageError(f"the {op_name} op cannot be part of a graph yet.")
        dtype = dtype or self.dtype
        label = name or f"{op_name}{len(self._nodes)}"
        problem = _node_problem(op, label, options, dtype)
        shapes = {t.name: t.shape for t in op.tensors(problem)}
        values = [self.input(f"{label}.{role}", shapes[role], dtype) for role in op.graph.inputs]
        return self._op_node(op, label, values, options, dtype, explicit=name is not None)

    def __getattr__(self, attr: str) -> Callable[..., Value]:
        """`g.conv2d(...)`, `g.add_gemm(...)`, `g.linear(...)`: the builders of the registry's ops."""
        if attr.startswith("_"):
            raise AttributeError(attr)
        found = _op_attr(attr)
        if found is None:
            raise AttributeError(f"Graph has no builder {attr!r}; ops: {', '.join(op_names())}")
        how, op_name = found
        if how == "add":
            return lambda **options: self.add_op(op_name, **options)

        def build(*tensors: Any, name: str | None = None, **keywords: Any) -> Value:
            op = get_op(op_name)
            binding = _binding(op)
            keywords = {**(binding.aliases.get(attr, {}) if binding else {}), **keywords}
            return self.op(op_name, *tensors, name=name, **keywords)

        return build

    def __dir__(self) -> list[str]:
        ops = [o.replace("-", "_") for o in op_names()]
        aliases = [a for o in op_names() if _binding(get_op(o)) is not None for a in _binding(get_op(o)).aliases]
        return sorted({*super().__dir__(), *ops, *(f"add_{o}" for o in ops), *aliases})

    # ---- the graph's own nodes -------------------------------------------------------------------------------------

    def bias(self, x: Value, b: Value | Any, *, name: str | None = None) -> Value:
        """x + b along the last axis (b has x's last size)."""
        label = name or f"bias{len(self._nodes)}"
        x, b = self._value(x, "input", name=label), self._value(b, "bias", name=label)
        if b.shape != (x.shape[-1],):
            raise UsageError(f"bias node {label!r}: the bias is {b.shape}, but it must be ({x.shape[-1]},) "
                             f"for a value of shape {x.shape} (one per channel, the last axis).")
        self._same_dtype(label, x, b)
        return self._append("bias", name, x.shape, x.dtype, inputs=(x.index, b.index), roles=("input", "bias"))

    def activation(self, kind: str, x: Value, *, name: str | None = None) -> Value:
        if kind not in ACTIVATIONS:
            raise UsageError(f"unknown activation {kind!r}.", f"Use one of {', '.join(ACTIVATIONS)}.")
        x = self._value(x, "input", name=name or kind)
        return self._append(kind, name, x.shape, x.dtype, inputs=(x.index,), roles=("input",))

    def relu(self, x: Value, *, name: str | None = None) -> Value:
        return self.activation("relu", x, name=name)

    def silu(self, x: Value, *, name: str | None = None) -> Value:
        return self.activation("silu", x, name=name)

    def gelu(self, x: Value, *, name: str | None = None) -> Value:
        return self.activation("gelu", x, name=name)

    def add(self, x: Value, y: Value | Any, *, name: str | None = None) -> Value:
        """x + y, of one shape."""
        label = name or f"add{len(self._nodes)}"
        x, y = self._value(x, "input", name=label), self._value(y, "other", name=label)
        if x.shape != y.shape:
            raise UsageError(f"add node {label!r}: shapes {x.shape} and {y.shape} differ.", "Add values of one shape.")
        self._same_dtype(label, x, y)
        return self._append("add", name, x.shape, x.dtype, inputs=(x.index, y.index), roles=("input", "other"))

    def batch_norm(self, x: Value, mean: Any, var: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5,
                   name: str | None = None) -> Value:
        """Inference batch norm over the last axis (channels): (x - mean) / sqrt(var + eps) * weight + bias."""
        label = name or f"batch_norm{len(self._nodes)}"
        x = self._value(x, "input", name=label)
        parts = {"mean": mean, "var": var, "weight": weight, "bias": bias}
        values = {role: self._value(v, role, name=label) for role, v in parts.items() if v is not None}
        for role, v in values.items():
            if v.shape != (x.shape[-1],):
                raise UsageError(f"batch_norm node {label!r}: its {role} is {v.shape}, but it must be "
                                 f"({x.shape[-1]},), one per channel (the last axis of {x.shape}).")
        if not eps > 0:
            raise UsageError(f"batch_norm node {label!r}: eps must be positive, got {eps}.")
        return self._append("batch_norm", name, x.shape, x.dtype, inputs=(x.index, *(v.index for v in values.values())),
                            roles=("input", *values), options=(("eps", float(eps)),))

    def fallback(self, fn: Callable[..., Any], *inputs: Value, shape: tuple[int, ...], dtype: str | None = None,
                 name: str | None = None) -> Value:
        """A node that runs `fn(*arrays)` itself when the plan runs (no Tracea kernel)."""
        values = [self._value(v, "input", name=name or "fallback") for v in inputs]
        return self._append("fallback", name, tuple(shape), dtype or (values[0].dtype if values else self.dtype),
                            inputs=tuple(v.index for v in values), roles=tuple(f"in{i}" for i in range(len(values))),
                            fn=fn)

    def output(self, *values: Value) -> Graph:
        """Mark the values a plan returns (default: every value nobody reads)."""
        for v in values:
            self._value(v, "output", name="output")
        self._outputs = tuple(dict.fromkeys((*self._outputs, *(v.index for v in values))))
        return self

    def _same_dtype(self, label: str, *values: Value) -> None:
        dtypes = {v.dtype for v in values}
        if len(dtypes) > 1:
            raise UsageError(f"node {label!r} mixes dtypes {', '.join(sorted(dtypes))}.", "Give inputs of one dtype.")

    # ---- importing ---------------------------------------------------------------------------------------------------

    @classmethod
    def from_fx(cls, gm: Any, example_inputs: Any = None, *, dtype: str | None = None) -> Graph:
        """A graph from a `torch.fx.GraphModule` (or an `nn.Module`, traced): Conv2d, Linear, BatchNorm2d, ReLU, SiLU,
        GELU and add become graph nodes; anything else a fallback node that runs the module's own code."""
        from tracea_cli.api.fx import graph_from_fx

        return graph_from_fx(cls, gm, example_inputs, dtype=dtype)
