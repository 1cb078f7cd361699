"""The terminal view of a tuning result (rich). Computing happens in driver.py; this only draws."""

from __future__ import annotations

from tracea_cli.space import config_key
from tracea_cli.text import counted
from tracea_cli.tune.driver import TuneResult


def render_tune(result: TuneResult, console) -> None:
    from rich.table import Table

    p = result.problem
    where = result.target.get("device_class", "")
    head = f"{p.get('label', p.get('op', ''))} on {where}"
    how = "cache hit: stored winner, no evaluations" if result.cache_hit else (
        f"{result.evaluations} evaluations this run, {result.trials_total} trials stored; stopped: {result.stopped_because}")
    space = f"; space: {counted(result.space_size, 'valid configuration')}" if result.space_size else ""
    console.print(f"[bold]{head}[/]  key {result.key}\n{how}{space}")
    if len(result.per_device) > 1:
        console.print("evaluations per device: " + ", ".join(f"GPU {d}: {n}" for d, n in sorted(result.per_device.items())))
    rows = list(result.ranking) or ([result.winner] if result.winner else [])
    if not rows:
        console.print("[red]no configuration ran correctly[/]; see the failures below.")
    else:
        table = Table(show_edge=False)
        for col in ("rank", "time (ms)", "cv", rows[0].rate_unit, "% of peak", "vs " + (result.baseline_name or "baseline")):
            table.add_column(col, justify="right")
        for i, r in enumerate(rows, 1):
            speedup = f"{result.baseline.median_ms / r.median_ms:.2f}x" if result.baseline else "-"
            table.add_row(str(i), f"{r.median_ms:.4f}", f"{r.cv:.1%}", f"{r.rate:.2f}", _pct(result, r), speedup)
        if result.baseline:
            b = result.baseline
            table.add_row(f"[dim]{result.baseline_name}[/]", f"{b.median_ms:.4f}", f"{b.cv:.1%}", f"{b.rate:.2f}",
                          _pct(result, b), "1.00x")
        console.print(table)
        for i, r in enumerate(rows, 1):  # configurations are long: one line each, below the numbers
            console.print(f"  {i}: {config_key(r.config)}", soft_wrap=True)
        if result.peak_flops:
            console.print(f"  % of peak: of the {result.peak_flops / (1e12 if rows[0].rate_unit == 'TFLOP/s' else 1e9):.1f} "
                          f"{rows[0].rate_unit} measured by tracea doctor: {result.peak_source}")
        elif result.peak_source:  # why the column is empty
            console.print(f"  % of peak: {result.peak_source}; `tracea doctor` (without --quick) measures it")
    for warning in result.warnings:
        console.print(f"[yellow]warning[/]: {warning}")
    if result.baseline_error:
        console.print(f"[yellow]the baseline could not be measured[/]: {result.baseline_error[:200]}")
    if result.failures:
        console.print(f"{counted(len(result.failures), 'configuration')} failed:")
        for f in result.failures[:10]:
            console.print(f"  [yellow]{f.status}[/] {config_key(f.config)}: {f.reason[:160]}")
        if len(result.failures) > 10:
            console.print(f"  ... and {len(result.failures) - 10} more (tracea cache show {result.key})")


def _pct(result: TuneResult, m) -> str:
    pct = result.pct_of_peak(m)
    return "-" if pct is None else f"{pct:.0f}%"
