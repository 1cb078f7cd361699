"""Running a plan's steps on the caller's arrays: op steps through their chosen kernels, other nodes by themselves.

Inputs are checked (device, dtype, shape, layout) and used in place; each op step's output is allocated with the
backend's array module and written by the kernel, with the epilogue's bias, residual and folded batch norm as the
fusion pass decided. Unfused pointwise nodes and batch norms compute in float64 and store in the graph's dtype;
fallback nodes call their function. Constants are placed on the device once, and what is computed from constants
alone (a folded weight, a folded bias) is computed once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from tracea_cli.api.arrays import as_torch, is_torch, native, storage_view
from tracea_cli.api.fusion import ZERO_BIAS, Step
from tracea_cli.api.graph import Graph, Node
from tracea_cli.backends.checked import storage_dtype
from tracea_cli.errors import UsageError
from tracea_cli.ops.dtypes import from_storage, to_storage
from tracea_cli.ops.epilogue_math import activate
from tracea_cli.ops.registry import get_op


def _xp(backend: str) -> Any:
    if backend == "cuda":
        import cupy

        return cupy
    return np


@dataclass
class Kernel:
    """One op step's compiled kernel (compiled on first use) and its launch per stream, moved to new operands in
    place (a CUDA launch's pointers are rewritten; elsewhere the launch is made again when the operands move)."""

    backend: Any  # backends.op_backend.OpBackend
    problem: Any
    config: Mapping[str, Any]
    target: Any
    artifact: Any = None
    bound: dict[int | None, tuple[Callable[[], None], dict[str, int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, operands: Mapping[str, Any], stream: int | None) -> None:
        # by the names the launch takes (a family may rename a tensor: conv2d's W is the kernel's `filter`)
        named = self.backend.family_of(self.config).args(self.problem, operands)
        addresses = {name: _address(v) for name, v in named.items()}
        with self.lock:
            if self.artifact is None:
                self.artifact = self.backend.compile(self.problem, self.config, self.target)
            found = self.bound.get(stream)
            if found is not None and found[1] != addresses:
                run, was = found
                if hasattr(run, "repoint"):
                    run.repoint({k: v for k, v in addresses.items() if was.get(k) != v})
                    found = self.bound[stream] = (run, addresses)
                else:
                    found = None
            if found is None:
                run = self.backend.launcher(self.artifact, self.problem, operands, stream=stream)
                found = self.bound[stream] = (run, addresses)
            found[0]()


    def pointer_launch(self, operands: Mapping[str, Any], stream: int | None,
                       names: tuple[str, ...]) -> Callable[[tuple[int, ...]], None] | None:
        """Launch once with `operands`, then return a launch on `stream` that takes only the device addresses of the
        operands `names` (in that order; the sizes stay): for a call that repeats with the same shapes, such as a
        model's layer. None where the launch cannot be moved that way (`launch` then)."""
        self.launch(operands, stream)
        family_names = self.backend.family_of(self.config).args(self.problem, {n: n for n in operands})
        renamed = {v: k for k, v in family_names.items() if isinstance(v, str) and v in operands}
        launch_names = tuple(renamed.get(n, n) for n in names)  # conv2d's W is the kernel's `filter`
        with self.lock:
            run = self.bound[stream][0]
            write = getattr(run, "pointer_writer", lambda _: None)(launch_names)
        if write is None:
            return None
        lock, bound, moved = self.lock, self.bound, (run, {})  # `launch` repoints everything after a move

        def go(addresses: tuple[int, ...]) -> None:
            with lock:
                write(addresses)
                bound[stream] = moved
                run()

        return go


def _address(a: Any) -> int:
    """Where an argument's data is (a raw pointer, or a size, as it is; 0 for an absent tensor)."""
    if a is None:
        return 0
    if isinstance(a, (int, np.integer)):  # a size
        return int(a)
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return int(a.data.ptr)


class Executor:
    """Runs `steps` of `graph` with `kernels` (step number -> Kernel) on the backend."""

    def __init__(self, graph: Graph, steps: tuple[Step, ...], kernels: Mapping[int, Kernel], backend: str) -> None:
        self.graph, self.steps, self.kernels, self.backend = graph, steps, kernels, backend
        self.xp = _xp(backend)
        self._constants: dict[int, Any] = {}
        self._derived: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()

    # ---- values ----------------------------------------------------------------------------------------------------

    def _constant(self, node: Node) -> Any:
        with self._lock:
            if node.index not in self._constants:
                a = node.value
                if is_torch(a):
                    a = storage_view(a.detach().cpu())
                a = np.ascontiguousarray(a)
                self._constants[node.index] = self.xp.asarray(a)
            return self._constants[node.index]

    def _float(self, a: Any, dtype: str) -> Any:
        return from_storage(a, dtype).astype(np.float64)

    def _store(self, values: Any, dtype: str) -> Any:
        return self.xp.ascontiguousarray(to_storage(values, dtype))

    # ---- running ---------------------------------------------------------------------------------------------------

    def __call__(self, arrays: Mapping[str, Any], stream: int | None = None) -> dict[int, Any]:
        nodes = self.graph.nodes
        names = {n.name for n in nodes if n.kind == "input"}
        unknown = sorted(set(arrays) - names)
        if unknown:
            raise UsageError(f"the graph has no input {unknown[0]!r}.", f"Its inputs: {', '.join(sorted(names)) or 'none'}.")
        values: dict[int, Any] = {}
        torch_in = False
        for n in nodes:
            if n.kind == "input":
                if n.name not in arrays:
                    raise UsageError(f"input {n.name!r} was not given.", f"Call the plan with {n.name}=array.")
                a = arrays[n.name]
                torch_in = torch_in or is_torch(a)
                values[n.index] = native(a, backend=self.backend, dtype=n.dtype, shape=n.shape, what=f"input {n.name!r}")
            elif n.kind == "constant":
                values[n.index] = self._constant(n)
        if stream is None and torch_in and self.backend == "cuda":
            import torch

            stream = torch.cuda.current_stream().cuda_stream
        for number, step in enumerate(self.steps):
            node = nodes[step.node]
            if step.is_op:
                values[step.output] = self._op(number, step, node, values, stream)
            else:
                values[step.output] = self._node(node, values)
        out = {i: values[i] for i in self.graph.outputs}
        if torch_in:
            out = {i: as_torch(a, nodes[i].dtype) for i, a in out.items()}
        return out

    def _op(self, number: int, step: Step, node: Node, values: dict[int, Any], stream: int | None) -> Any:
        kernel = self.kernels[number]
        problem = kernel.problem
        operands: dict[str, Any] = {}
        for role, index in step.operands:
            if role == "bias" and index == ZERO_BIAS:
                operands[role] = self._bias(step, node, values)
            elif step.fold is not None and role == step.fold.weight:
                operands[role] = self._folded_weight(step, values)
            else:
                operands[role] = values[index]
        op = get_op(step.runs(self.graph)[0])
        out_tensor = next(t for t in op.tensors(problem) if t.name == op.graph.output)
        out = self.xp.empty(out_tensor.shape, dtype=storage_dtype(problem.dtype))
        operands[op.graph.output] = out
        kernel.launch(operands, stream)
        return out

    def _from_constants(self, step: Step, what: str, sources: tuple[int, ...], compute: Callable[[], Any]) -> Any:
        """`compute()`, once when every node it reads is a constant (else on every call)."""
        if all(self.graph.nodes[i].kind == "constant" for i in sources):
            key = (step.node, what)
            with self._lock:
                if key not in self._derived:
                    self._derived[key] = compute()
                return self._derived[key]
        return compute()

    def _norm(self, step: Step, values: dict[int, Any]) -> tuple[Any, Any]:
        """(scale, shift) of the folded batch norm, in float64."""
        norm = self.graph.nodes[step.fold.norm]
        get = {role: self._float(values[i], norm.dtype) for role, i in zip(norm.roles, norm.inputs) if role != "input"}
        eps = dict(norm.options)["eps"]
        scale = get.get("weight", 1.0) / self.xp.sqrt(get["var"] + eps)
        return scale, get.get("bias", 0.0) - get["mean"] * scale

    def _norm_sources(self, step: Step) -> tuple[int, ...]:
        return self.graph.nodes[step.fold.norm].inputs[1:] if step.fold else ()

    def _folded_weight(self, step: Step, values: dict[int, Any]) -> Any:
        node = self.graph.nodes[step.node]
        weight = dict(step.operands)[step.fold.weight]

        def compute() -> Any:
            scale, _ = self._norm(step, values)
            w = self._float(values[weight], node.dtype)
            shape = [1] * w.ndim
            shape[step.fold.axis] = -1
            return self._store(w * scale.reshape(shape), node.dtype)

        return self._from_constants(step, "weight", (weight, *self._norm_sources(step)), compute)

    def _bias(self, step: Step, node: Node, values: dict[int, Any]) -> Any:
        channels = self.graph.nodes[step.output].shape[-1]

        def compute() -> Any:
            bias = self.xp.zeros(channels)
            for i in step.biases_before:
                bias = bias + self._float(values[i], node.dtype)
            if step.fold is not None:
                scale, shift = self._norm(step, values)
                bias = bias * scale + shift
            for i in step.biases_after:
                bias = bias + self._float(values[i], node.dtype)
            return self._store(bias, node.dtype)

        sources = (*step.biases_before, *step.biases_after, *self._norm_sources(step))
        return self._from_constants(step, "bias", sources, compute)

    def _node(self, node: Node, values: dict[int, Any]) -> Any:
        if node.kind == "fallback":
            return node.fn(*(values[i] for i in node.inputs))
        x = {role: self._float(values[i], node.dtype) for role, i in zip(node.roles, node.inputs)}
        if node.kind == "bias":
            y = x["input"] + x["bias"]
        elif node.kind == "add":
            y = x["input"] + x["other"]
        elif node.kind == "batch_norm":
            eps = dict(node.options)["eps"]
            y = (x["input"] - x["mean"]) / self.xp.sqrt(x["var"] + eps) * x.get("weight", 1.0) + x.get("bias", 0.0)
        else:
            y = activate(x["input"], node.kind)
        return self._store(y, node.dtype)
