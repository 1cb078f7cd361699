"""Tracea's Python API.

    import tracea
    ctx = tracea.Context()                 # this machine's profile (made by the quick doctor if missing), the cache
    graph = tracea.Graph()
    graph.add_gemm(m=2048, n=2048, k=2048)
    plan = ctx.optimize_graph(graph)       # a Plan: per step the kernel, where it came from, its times
    print(plan)

    from tracea import patch_conv2d
    patch_conv2d()                         # torch.nn.Conv2d through Tracea's kernels where they apply

docs/python-api.md is the guide. The code lives in `tracea_cli`; this package only names what is public.
"""

from tracea_cli import __version__
from tracea_cli.api.context import Context
from tracea_cli.api.graph import Graph, Node, Value
from tracea_cli.api.plan import Plan, PlanRow
from tracea_cli.api.torch_patch import patch_conv2d, patch_report, unpatch_conv2d
from tracea_cli.errors import RunFailed, ToolchainMissing, TraceaError, UsageError

__all__ = ["Context", "Graph", "Node", "Plan", "PlanRow", "RunFailed", "ToolchainMissing", "TraceaError",
           "UsageError", "Value", "__version__", "patch_conv2d", "patch_report", "unpatch_conv2d"]
