"""`Context`: this machine's profile, the tuning cache and what the CLI takes as flags, and `optimize_graph`."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracea_cli.api.choose import MODES, Request, choose
from tracea_cli.api.fusion import fuse
from tracea_cli.api.graph import Graph
from tracea_cli.api.plan import Plan, PlanRow
from tracea_cli.api.run import Executor, Kernel
from tracea_cli.errors import UsageError
from tracea_cli.ops.registry import get_op

DEFAULT_BUDGET = 40  # evaluations per tuned step, as `tracea tune`
DEFAULT_TIME_LIMIT_S = 45.0  # search time per optimize_graph call, shared among the steps that miss the cache
STRATEGIES = ("bayes", "random", "grid")


def _device(device: Any) -> tuple[str, int | None]:
    """("auto" | "cuda" | "cpu", CUDA index) from None, "cpu", "cuda", "cuda:N" or N."""
    if device is None:
        return "auto", None
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return "cuda", device
    if isinstance(device, str):
        text = device.strip().lower()
        if text in ("cpu", "cuda"):
            return text, None
        if text.startswith("cuda:") and text[5:].isdigit():
            return "cuda", int(text[5:])
    raise UsageError(f"device {device!r} is not one Tracea knows.", "Use None, 'cpu', 'cuda', 'cuda:N' or a CUDA index N.")


class Context:
    """Where graphs are optimised: this machine's capability profile (made with the quick doctor when there is none,
    as the CLI does), the tuning cache, the device, and how a cache miss is handled:

    - mode "tune" (default): tune within `budget` evaluations per step and `time_limit_s` for the whole graph,
      steps in order of their estimated share of the graph's time (the rest get the default pick);
    - mode "default": the families' first pick, checked and timed once (zero-config: seconds, not minutes);
    - mode "cached": a miss raises a tracea error naming the node.

    `device`: None (a CUDA GPU where one is usable, else the CPU), "cpu", "cuda", "cuda:N" or N. `cache`: the cache
    folder (default: TRACEA_CACHE_DIR or the user cache). `executor`: where tuning evaluations run, "local" or "ray"
    (with `ray_address`), as `tracea tune --executor`."""

    def __init__(self, device: Any = None, cache: str | Path | None = None, mode: str = "tune", *,
                 budget: int = DEFAULT_BUDGET, time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
                 strategy: str = "bayes", seed: int = 0, executor: str = "local", ray_address: str | None = None) -> None:
        from tracea_cli.config import Settings
        from tracea_cli.doctor.profile import cpu_target, cuda_target
        from tracea_cli.doctor.run import load_or_make_profile
        from tracea_cli.tune.setup import resolve_backend

        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}.", f"Use one of {', '.join(MODES)}.")
        if strategy not in STRATEGIES:
            raise UsageError(f"unknown strategy {strategy!r}.", f"Use one of {', '.join(STRATEGIES)}.")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise UsageError(f"budget must be a whole number of at least 1, got {budget!r}.")
        if time_limit_s is not None and not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
            raise UsageError(f"time_limit_s must be a positive number of seconds (or None), got {time_limit_s!r}.")
        from tracea_cli.tune.executor import check_executor

        check_executor(executor, ray_address)
        self.mode, self.budget, self.time_limit_s, self.strategy, self.seed = mode, budget, time_limit_s, strategy, seed
        self.executor, self.ray_address = executor, ray_address
        settings = Settings.from_env()
        if cache is not None:
            settings = replace(settings, cache_dir=Path(cache).expanduser())
        self.settings = settings
        self.profile = load_or_make_profile(settings)
        backend, index = _device(device)
        self.backend = resolve_backend(backend)
        if self.backend == "cuda":
            self.target = cuda_target(self.profile, index or 0)
            self._devices: str | None = str(index or 0)
        else:
            self.target = cpu_target(self.profile)
            self._devices = None

    def __repr__(self) -> str:
        return (f"Context(backend={self.backend!r}, device={self.target.device_class!r}, mode={self.mode!r}, "
                f"budget={self.budget}, time_limit_s={self.time_limit_s})")

    def _request(self) -> Request:
        from tracea_cli.doctor.ceilings import ceiling_from_profile

        def ceiling(dtype: str) -> Any:
            return ceiling_from_profile(self.profile, backend=self.backend, dtype=dtype,
                                        device_index=self.target.device_index)

        return Request(self.backend, self._devices, self.mode, self.budget, self.time_limit_s, self.strategy,
                       self.seed, self.settings, self.target, ceiling, self.executor, self.ray_address)

    def optimize_graph(self, graph: Graph) -> Plan:
        """Fuse the graph, then choose a kernel for each op step (cache hit, or what `mode` says on a miss)."""
        from tracea_cli.backends.op_backend import OpBackend

        if not isinstance(graph, Graph):
            raise UsageError(f"optimize_graph takes a tracea.Graph, not {type(graph).__name__}.")
        if not graph.nodes:
            raise UsageError("the graph is empty.", "Add nodes first, e.g. graph.add_gemm(m=2048, n=2048, k=2048).")
        began = time.monotonic()
        steps = fuse(graph, self.backend)
        nodes = graph.nodes
        problems = {}
        for number, step in enumerate(steps):
            if step.is_op:
                node = nodes[step.node]
                op_name, options = step.runs(graph)
                problem = get_op(op_name).problem(**options, dtype=node.dtype, epilogue=step.epilogue)
                problems[number] = (problem, node.label)
        choices = choose(problems, self._request())
        kernels = {number: Kernel(OpBackend(c.problem.op, self.backend), c.problem, c.config, self.target)
                   for number, c in choices.items()}
        rows = []
        for number, step in enumerate(steps):
            node = nodes[step.node]
            fused = tuple(nodes[i].name for i in (*step.merged, *step.fused))
            c = choices.get(number)
            if c is None:
                rows.append(PlanRow(number, node.name, node.kind, "x".join(map(str, nodes[step.output].shape)), "",
                                    fused, "graph", None, None))
            else:
                rows.append(PlanRow(number, node.name, c.problem.op, c.problem.label, step.epilogue, fused, c.source,
                                    c.estimated_ms, c.measured_ms, c.evaluations, dict(c.config), c.key.id))
        return Plan(tuple(rows), self.backend, self.target.device_class, time.monotonic() - began,
                    Executor(graph, steps, kernels, self.backend))
