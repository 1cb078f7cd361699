"""The terminal view of a tuning result (rich). Computing happens in driver.py; this only draws."""

from __future__ import annotations

from tracea_cli.space import config_key
from tracea_cli.tune.driver import TuneResult


def render_tune(result: TuneResult, console) -> None:
    from rich.table import Table

    p = result.problem
    where = result.target.get("device_class", "")
    head = f"gemm {p.get('m')}x{p.get('n')}x{p.get('k')} {p.get('dtype')} {p.get('layout')} on {where}"
    how = "cache hit: stored winner, no evaluations" if result.cache_hit else (
        f"{result.evaluations} evaluations this run, {result.trials_total} trials stored; stopped: {result.stopped_because}")
    console.print(f"[bold]{head}[/]  key {result.key}\n{how}; space: {result.space_size} valid configurations")
    rows = list(result.ranking) or ([result.winner] if result.winner else [])
    if not rows:
        console.print("[red]no configuration ran correctly[/]; see the failures below.")
    else:
        table = Table(show_edge=False)
        for col in ("rank", "configuration", "time (ms)", "cv", rows[0].rate_unit, "speed-up vs " + (result.baseline_name or "baseline")):
            table.add_column(col, justify="left" if col == "configuration" else "right")
        for i, r in enumerate(rows, 1):
            speedup = f"{result.baseline.median_ms / r.median_ms:.2f}x" if result.baseline else "-"
            table.add_row(str(i), config_key(r.config), f"{r.median_ms:.4f}", f"{r.cv:.1%}", f"{r.rate:.2f}", speedup)
        if result.baseline:
            b = result.baseline
            table.add_row("", f"[dim]{result.baseline_name}[/]", f"{b.median_ms:.4f}", f"{b.cv:.1%}", f"{b.rate:.2f}", "1.00x")
        console.print(table)
    if result.baseline_error:
        console.print(f"[yellow]the baseline could not be measured[/]: {result.baseline_error[:200]}")
    if result.failures:
        console.print(f"{len(result.failures)} configurations failed:")
        for f in result.failures[:10]:
            console.print(f"  [yellow]{f.status}[/] {config_key(f.config)}: {f.reason[:160]}")
        if len(result.failures) > 10:
            console.print(f"  ... and {len(result.failures) - 10} more (tracea cache show {result.key})")
