"""The terminal report (rich): a headline, one table row per problem and provider, the comparison, the failures."""

from __future__ import annotations

from tracea_cli.bench.results import BenchResults, overview
from tracea_cli.report import units


def render_terminal(results: BenchResults, console) -> None:
    from rich.table import Table

    env = results.environment
    ov = overview(results)
    rate, rate_div = units.rate_unit(results)
    bw, bw_div = units.bandwidth_unit(results)
    console.print(f"[bold]tracea bench[/] · suite {env.suite} · {env.device} ({env.backend}{', ' + env.arch if env.arch else ''}) · {env.created}")

    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for name, justify in (("problem", "left"), ("provider", "left"), ("median ms", "right"), ("IQR ms", "right"), ("cv", "right"),
                          ("n", "right"), (rate, "right"), (bw, "right"), ("% ceiling", "right"), ("speed-up [95% CI]", "right"), ("notes", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for p in results.problems:
        rows = results.rows_for(p.problem)
        for i, r in enumerate(rows):
            style = None if r.ok else "red"
            provider = r.provider if r.kind != "tuned" else f"[bold]{r.provider}[/]"
            notes = units.notes(r)
            if r.throttled:
                notes = f"[yellow]{notes}[/]"
            table.add_row(
                p.problem if i == 0 else "",
                provider,
                units.ms(r.median_ms),
                units.iqr(r),
                units.cv(r.cv),
                str(r.n) if r.n else "-",
                units.scaled(r.flops_per_s, rate_div),
                units.scaled(r.bytes_per_s, bw_div),
                units.pct(r.pct_of_ceiling),
                units.speedup(r.speedup),
                notes,
                style=style,
                end_section=i == len(rows) - 1,
            )
    console.print(table)

    if ov.speedup_geomean is not None:
        console.print(
            f"speed-up over {ov.baseline}: geometric mean {ov.speedup_geomean:.2f}× (range {ov.speedup_min:.2f}–{ov.speedup_max:.2f}); "
            f"significantly faster on {ov.faster}, slower on {ov.slower} of {ov.problems} problems"
        )
    if ov.best_pct_of_ceiling is not None:
        console.print(f"best: {ov.best_pct_of_ceiling:.1f}% of the measured ceiling ({ov.best_pct_problem})")
    if ov.throttled_rows:
        console.print(f"[yellow]{ov.throttled_rows} measurement(s) overlapped clock throttling; their times may be high.[/]")

    if results.comparison is not None:
        _render_comparison(results, console)
    failures = results.failures
    if failures:
        console.print(f"[red]{len(failures)} failure(s)[/]:")
        for f in failures[:20]:
            what = f" {units.config_text(f['config'])}" if f.get("config") else ""
            console.print(f"  {f['problem']} · {f['provider']} ({f['stage']}) [red]{f['status']}[/]{what}: {f['reason'][:200]}")
        if len(failures) > 20:
            console.print(f"  ... and {len(failures) - 20} more (see the JSON or HTML report)")


def _render_comparison(results: BenchResults, console) -> None:
    from rich.table import Table

    c = results.comparison
    assert c is not None
    console.print(f"[bold]compared with[/] {c.against} ({c.against_created}); significant: the 95% interval of the change is beyond ±{100 * c.threshold:.0f}%")
    for w in c.warnings:
        console.print(f"[yellow]note: {w}[/]")
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for name, justify in (("problem", "left"), ("provider", "left"), ("old ms", "right"), ("new ms", "right"), ("time change [95% CI]", "right"), ("verdict", "left")):
        table.add_column(name, justify=justify)
    for ch in c.changes:
        verdict = "[red]REGRESSION[/]" if ch.regression else "[green]improved[/]" if ch.improvement else "no significant change"
        table.add_row(ch.problem, ch.provider, units.ms(ch.old_median_ms), units.ms(ch.new_median_ms), units.ratio_change(ch.ratio), verdict)
    console.print(table)
    if c.unmatched:
        console.print(f"not in both: {', '.join(c.unmatched)}")
