"""What `Context.optimize_graph` returns: per step the op, its shape, the fused epilogue, the kernel and where it came
from, the estimated and measured times. A Plan prints as a table and runs the graph: `plan(x=array, ...)`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from tracea_cli.text import config_text


@dataclass(frozen=True)
class PlanRow:
    """One step of a plan, as the table shows it."""

    step: int
    node: str  # the node's name (the anchor's, for a fused op step)
    op: str  # the op, or the node kind run by itself ("relu", "fallback")
    shape: str  # the problem's label, or the value's shape
    epilogue: str  # the fused epilogue; "" for a node run by itself
    fused: tuple[str, ...]  # the names of the nodes folded into it
    source: str  # "cached" | "tuned" | "default" | "graph" (run by itself, not a kernel)
    estimated_ms: float | None
    measured_ms: float | None
    evaluations: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)  # the kernel's configuration; empty for a node by itself
    key: str = ""  # the tuning cache key id

    @property
    def kernel(self) -> str:
        """The configuration as text (family and parameters)."""
        return config_text(self.config)


@dataclass(frozen=True)
class Plan:
    """A graph's steps with their kernels. Call it with the graph's inputs by name; it returns the output array (one
    output) or a dict of outputs by node name, of the caller's kind (torch in, torch out)."""

    rows: tuple[PlanRow, ...]
    backend: str
    device: str  # the device class the kernels were chosen for
    tune_s: float  # seconds optimize_graph spent choosing (tuning included)
    executor: Any = field(repr=False, compare=False)

    def __call__(self, stream: int | None = None, **arrays: Any) -> Any:
        out = self.executor(arrays, stream=stream)
        nodes = self.executor.graph.nodes
        if len(out) == 1:
            return next(iter(out.values()))
        return {nodes[i].name: a for i, a in out.items()}

    @property
    def estimated_ms(self) -> float | None:
        known = [r.estimated_ms for r in self.rows if r.estimated_ms is not None]
        return sum(known) if known else None

    @property
    def measured_ms(self) -> float | None:
        """The kernels' measured times summed (the steps run by themselves are not timed)."""
        known = [r.measured_ms for r in self.rows if r.measured_ms is not None]
        return sum(known) if known else None

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "device": self.device, "tune_s": self.tune_s,
                "estimated_ms": self.estimated_ms, "measured_ms": self.measured_ms,
                "steps": [{"step": r.step, "node": r.node, "op": r.op, "shape": r.shape, "epilogue": r.epilogue,
                           "fused": list(r.fused), "config": dict(r.config), "source": r.source, "key": r.key,
                           "estimated_ms": r.estimated_ms, "measured_ms": r.measured_ms,
                           "evaluations": r.evaluations} for r in self.rows]}

    def __str__(self) -> str:
        from tracea_cli.api.render import render_plan

        return render_plan(self)

    def __rich__(self) -> Any:
        from tracea_cli.api.render import plan_table

        return plan_table(self)
