"""The terminal report (rich): a headline, per problem its providers' figures, the comparison, the failures.

Laid out to fit 80 columns: each problem is a heading line followed by one row per provider, in columns of fixed
width so that they align across problems. Quartiles, bytes/s and configurations are in the file reports.
"""

from __future__ import annotations

from tracea_cli.bench.results import TUNED, BenchResults, overview
from tracea_cli.report import units
from tracea_cli.text import config_text

# (header, width, justify)
COLUMNS = (("provider", 8, "left"), ("median ms", 9, "right"), ("cv", 6, "right"), ("n", 4, "right"), ("{rate}", 8, "right"),
           ("% ceiling", 9, "right"), ("speed-up [95% CI]", 19, "right"))


def _table(rate: str, header: bool):
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD if header else None, show_header=header, show_edge=False, pad_edge=False, header_style="bold")
    for name, width, justify in COLUMNS:
        table.add_column(name.format(rate=rate), width=width, justify=justify, no_wrap=True, overflow="ellipsis")
    return table


def render_terminal(results: BenchResults, console) -> None:
    env = results.environment
    ov = overview(results)
    rate, rate_div = units.rate_unit(results)
    console.print(f"[bold]tracea bench[/] · suite {env.suite} · {env.device} ({env.backend}{', ' + env.arch if env.arch else ''}) · {env.created}",
                  soft_wrap=True)
    console.print(_table(rate, header=True))
    marks: set[str] = set()
    for p in results.problems:
        console.print(f"[bold]{p.problem}[/]", soft_wrap=True)
        table = _table(rate, header=False)
        for r in results.rows_for(p.problem):
            provider = f"[bold]{r.provider}[/]" if r.kind == TUNED else r.provider
            if not r.ok:
                table.add_row(provider, f"[red]{'skipped' if r.status == 'skipped' else 'failed'}[/]", "", "", "", "", "")
                marks.add("failed")
                continue
            median = units.ms(r.median_ms)
            if r.throttled:
                median += "*"
                marks.add("throttled")
            pct = units.pct(r.pct_of_ceiling)
            if units.above_ceiling(r):
                pct = f"[yellow]{pct}![/]"
                marks.add("above")
            speed = units.speedup(r.speedup)
            if r.speedup is not None:
                tone = "green" if r.speedup.low > 1 else "red" if r.speedup.high < 1 else ""
                speed = f"[{tone}]{speed}[/]" if tone else speed
            table.add_row(provider, median, units.cv(r.cv), str(r.n), units.scaled(r.flops_per_s, rate_div), pct, speed)
        console.print(table)

    busy = units.busy_warning(env)
    if busy:
        console.print(f"[yellow]warning: {busy}[/]")
    if ov.speedup_geomean is not None:
        console.print(f"speed-up over {ov.baseline}: geometric mean {ov.speedup_geomean:.2f}× (range {ov.speedup_min:.2f}–{ov.speedup_max:.2f}); "
                      f"significantly faster on {ov.faster}, slower on {ov.slower} of {ov.problems} problems")
    if ov.best_pct_of_ceiling is not None:
        console.print(f"best: {ov.best_pct_of_ceiling:.1f}% of the measured ceiling ({ov.best_pct_problem})")
    if "throttled" in marks:
        console.print("[yellow]*[/] some samples overlapped clock throttling; the time may be high.")
    if units.no_ceilings(results):
        console.print(f"[yellow]{units.NO_CEILINGS_NOTE}[/]")
    if "above" in marks:
        console.print("[yellow]![/] above the measured ceiling: the profile's figure is low (re-run `tracea doctor` on a quiet machine).")

    if results.comparison is not None:
        _render_comparison(results, console)
    failures = results.failures
    if failures:
        console.print(f"[red]{len(failures)} failure(s)[/]:")
        for f in failures[:20]:
            what = f" {config_text(f['config'])}" if f.get("config") else ""
            console.print(f"  {f['problem']} · {f['provider']} ({f['stage']}) [red]{f['status']}[/]{what}: {f['reason'][:200]}")
        if len(failures) > 20:
            console.print(f"  ... and {len(failures) - 20} more (see the JSON or HTML report)")


def _render_comparison(results: BenchResults, console) -> None:
    from rich import box
    from rich.table import Table

    c = results.comparison
    assert c is not None
    console.print(f"[bold]compared with[/] {c.against} ({c.against_created}): significant when the 95% interval of the change "
                  f"is beyond ±{100 * c.threshold:.0f}%")
    for w in c.warnings:
        console.print(f"[yellow]note: {w}[/]")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for name, justify in (("problem · provider", "left"), ("old ms", "right"), ("new ms", "right"), ("change [95% CI]", "right"), ("verdict", "left")):
        table.add_column(name, justify=justify)
    for ch in c.changes:
        verdict = "[red]REGRESSION[/]" if ch.regression else "[green]improved[/]" if ch.improvement else "not significant"
        table.add_row(f"{ch.problem} · {ch.provider}", units.ms(ch.old_median_ms), units.ms(ch.new_median_ms), units.ratio_change(ch.ratio), verdict)
    console.print(table)
    if c.unmatched:
        console.print(f"not in both: {', '.join(c.unmatched)}")
