"""A plan as a rich table, and as the text `print(plan)` shows."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def plan_table(plan: Any) -> Table:
    """`plan`: an api.plan.Plan (its rows and totals)."""
    table = Table(title=f"tracea plan · {plan.backend} · {plan.device}", title_justify="left")
    for name, justify in (("#", "right"), ("node", "left"), ("op", "left"), ("shape", "left"), ("epilogue", "left"),
                          ("kernel", "left"), ("source", "left"), ("est. ms", "right"), ("measured ms", "right")):
        table.add_column(name, justify=justify, overflow="fold")
    for r in plan.rows:
        fused = f" (+{', '.join(r.fused)})" if r.fused else ""
        source = f"{r.source} ({r.evaluations} trials)" if r.source in ("cached", "tuned") else r.source
        table.add_row(str(r.step), r.node + fused, r.op, r.shape, r.epilogue or "-", r.kernel or "-", source,
                      _ms(r.estimated_ms), _ms(r.measured_ms))
    est, meas = plan.estimated_ms, plan.measured_ms
    table.caption = (f"kernels: estimated {_ms(est)} ms, measured {_ms(meas)} ms · chosen in {plan.tune_s:.1f} s")
    table.caption_justify = "left"
    return table


def render_plan(plan: Any, width: int = 160) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, no_color=True, highlight=False).print(plan_table(plan))
    return buffer.getvalue().rstrip("\n")
