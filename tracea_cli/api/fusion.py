"""The fusion pass: a graph becomes steps, each one op node with the pointwise chain it absorbs as its epilogue, or
one node run by itself.

Following an op node (the anchor), nodes that read only the previous value of the chain, and whose value nobody else
reads (and no one asked for as an output), join it while the op has an epilogue for what they do:

    anchor [bias] [batch_norm] [bias] [activation] [add other] [activation]

A batch norm (inference) is folded into the anchor's weights and bias: scale = weight / sqrt(var + eps) multiplies
the output channels' weights, and bias' = bias * scale + (bias_bn - mean * scale). An `add` becomes the epilogue's
residual (with a zero bias where the chain had none). The longest chain whose name ("bias_relu",
"bias_residual_relu") is among the op's epilogues wins; the rest of the chain runs node by node.

Before that, two op nodes in a row may become one step of a third op: where an op's GraphBinding lists a `NodePair`
of the first node's op and the second's (x → linear → linear is one lowrank-mlp where the middle is narrow), the first
node's value is read by the second alone (as the pair's `through` input, and asked for as no output), the pair's
`options` accept the two nodes' options and the op takes their dtype (on the plan's backend), the step runs that op
with the operands the pair names, anchored at the second node: its chain fuses as that op's epilogue. The pass asks
the registry's ops for their pairs; it names none.

Steps come in the order of the nodes they write, which is an order in which everything a step reads exists: the
graph is append-only (no cycles), and a value read by two nodes ends its chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracea_cli.api.graph import Graph, Node
from tracea_cli.errors import UsageError
from tracea_cli.ops.base import ACTIVATIONS, NodePair
from tracea_cli.ops.registry import get_op, op_names

ZERO_BIAS = -1  # the operand index of a bias the epilogue needs but the chain did not have (zeros)


@dataclass(frozen=True)
class Fold:
    """A batch norm folded into the anchor: its node, and the op tensor (and axis) holding output channels' weights."""

    norm: int
    weight: str
    axis: int


@dataclass(frozen=True)
class Step:
    """`node` runs (an op node with `epilogue`, or any other node by itself) and writes the value of `output`.
    `fused` are the nodes absorbed into the epilogue, in order; `operands` maps the op's tensor names to the nodes
    (or ZERO_BIAS: the bias is computed) they read; `biases_before` and `biases_after` are the bias nodes before
    and after the folded batch norm, from which a computed bias is made. A step that computes a pair of op nodes
    as one (see the module's docstring) names the op it runs and that op's options, and `merged` the pair's first
    node; other op steps run their node's own op and options."""

    node: int
    output: int
    epilogue: str = "none"
    fused: tuple[int, ...] = ()
    operands: tuple[tuple[str, int], ...] = ()
    biases_before: tuple[int, ...] = ()
    biases_after: tuple[int, ...] = ()
    fold: Fold | None = None
    op: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    merged: tuple[int, ...] = ()

    @property
    def is_op(self) -> bool:
        return bool(self.operands)

    def runs(self, graph: Graph) -> tuple[str, dict[str, Any]]:
        """(the op this step runs, its option values)."""
        if self.op is not None:
            return self.op, dict(self.options)
        node = graph.nodes[self.node]
        return node.op, dict(node.options)


@dataclass(frozen=True)
class Merge:
    """A pair of op nodes computed as one node of `op`: the first's index, the op's options and its operands (tensor
    name -> the node whose value it is)."""

    first: int
    op: str
    options: tuple[tuple[str, Any], ...]
    operands: tuple[tuple[str, int], ...]


def _pairs() -> list[tuple[str, NodePair]]:
    """(op name, pair) for every pair the registry's ops list."""
    out = []
    for name in op_names():
        binding = getattr(get_op(name), "graph", None)
        out.extend((name, pair) for pair in getattr(binding, "pairs", ()))
    return out


def _merge(graph: Graph, first: Node, pairs: list[tuple[str, NodePair]],
           backend: str | None) -> tuple[int, Merge] | None:
    """(the second node, the merge) where an op computes `first` and its only reader as one node."""
    readers = graph.consumers(first.index)
    if first.index in graph._outputs or len(readers) != 1:
        return None
    second = graph.nodes[readers[0]]
    if second.kind != "op" or second.dtype != first.dtype:
        return None
    reads = [role for role, i in zip(second.roles, second.inputs) if i == first.index]
    for op_name, pair in pairs:
        if (pair.first, pair.second) != (first.op, second.op) or reads != [pair.through]:
            continue
        op = get_op(op_name)
        if backend is not None and first.dtype not in op.dtypes.get(backend, ()):
            continue
        options = pair.options(dict(first.options), dict(second.options))
        if options is None:
            continue
        try:
            op.problem(**options, dtype=first.dtype, epilogue="none")
        except UsageError:  # beyond the op's limits
            continue
        nodes = (first, second)
        operands = tuple((tensor, nodes[which].input_for(role)) for tensor, (which, role) in pair.operands.items())
        return second.index, Merge(first.index, op_name, tuple(sorted(options.items())), operands)
    return None


def _chain(graph: Graph, anchor: Node) -> list[Node]:
    """The single-consumer nodes after `anchor`, each reading the previous value as its first input."""
    outputs = set(graph._outputs)
    chain: list[Node] = []
    current = anchor
    while current.index not in outputs:
        readers = graph.consumers(current.index)
        if len(readers) != 1:
            break
        nxt = graph.nodes[readers[0]]
        if nxt.kind not in ("bias", "batch_norm", "add", *ACTIVATIONS) or nxt.inputs[0] != current.index:
            break
        if nxt.kind == "add" and nxt.inputs[1] == current.index:  # x + x
            break
        chain.append(nxt)
        current = nxt
    return chain


def _parse(chain: list[Node]) -> list[tuple[int, str]]:
    """(length, epilogue name) for each prefix of `chain` that follows the grammar in the module's docstring."""
    out: list[tuple[int, str]] = []
    bias_before = bias_after = seen_norm = False
    act = post = residual = None
    for i, node in enumerate(chain):
        k = node.kind
        linear = act is None and residual is None  # still before the activation and the residual
        if k == "bias" and linear and not (bias_after if seen_norm else bias_before):
            bias_after, bias_before = (True, bias_before) if seen_norm else (bias_after, True)
        elif k == "batch_norm" and linear and not seen_norm:
            seen_norm = True
        elif k in ACTIVATIONS and act is None and residual is None:
            act = k
        elif k == "add" and residual is None:
            residual = node.index
        elif k in ACTIVATIONS and residual is not None and post is None:
            post = k
        else:
            break
        parts = (["bias"] if bias_before or bias_after or seen_norm or residual is not None else []) + ([act] if act else []) \
            + (["residual"] if residual is not None else []) + ([post] if post else [])
        out.append((i + 1, "_".join(parts) or "none"))
    return out


def _op_step(graph: Graph, anchor: Node, merge: Merge | None = None) -> Step:
    op = get_op(merge.op if merge else anchor.op)
    options = dict(merge.options if merge else anchor.options)
    names = {e.name for e in op.epilogues}
    chain = _chain(graph, anchor)
    length, epilogue = next(((n, e) for n, e in reversed(_parse(chain)) if e in names), (0, "none"))
    fused = chain[:length]
    operands = dict(merge.operands if merge else zip(anchor.roles, anchor.inputs))
    norm = next((n for n in fused if n.kind == "batch_norm"), None)
    cut = norm.index if norm is not None else len(graph.nodes)
    before = tuple(n.inputs[1] for n in fused if n.kind == "bias" and n.index < cut)
    after = tuple(n.inputs[1] for n in fused if n.kind == "bias" and n.index > cut)
    fold = None
    if norm is not None:
        problem = op.problem(**options, dtype=anchor.dtype)
        weight, axis = op.graph.channel_axis(problem)
        fold = Fold(norm.index, weight, axis)
    if "bias" in epilogue.split("_"):
        operands["bias"] = before[0] if len(before) == 1 and fold is None else ZERO_BIAS
    add = next((n for n in fused if n.kind == "add"), None)
    if add is not None:
        operands["residual"] = add.inputs[1]
    ran = (merge.op, merge.options, (merge.first,)) if merge else (None, (), ())
    return Step(anchor.index, fused[-1].index if fused else anchor.index, epilogue,
                tuple(n.index for n in fused), tuple(operands.items()), before, after, fold, *ran)


def fuse(graph: Graph, backend: str | None = None) -> tuple[Step, ...]:
    """The graph's steps, in an order that runs (see the module's docstring). `backend`: where the plan runs (a pair
    of nodes becomes another op's step only where that op takes their dtype there); None: any backend."""
    pairs = _pairs() if any(n.kind == "op" for n in graph.nodes) else []
    merges: dict[int, Merge] = {}  # the second node of a pair -> its merge
    taken: set[int] = set()
    for node in graph.nodes:
        if node.kind == "op" and node.index not in taken and pairs:
            found = _merge(graph, node, pairs, backend)
            if found is not None and found[0] not in taken:
                merges[found[0]] = found[1]
                taken |= {node.index, found[0]}
    firsts = {m.first for m in merges.values()}
    steps: list[Step] = []
    absorbed: set[int] = set()
    for node in graph.nodes:
        if node.kind == "op" and node.index not in firsts:
            step = _op_step(graph, node, merges.get(node.index))
            absorbed |= set(step.fused)
            steps.append(step)
    for node in graph.nodes:
        if node.kind not in ("input", "constant", "op") and node.index not in absorbed:
            steps.append(Step(node.index, node.index))
    return tuple(sorted(steps, key=lambda s: s.output))
