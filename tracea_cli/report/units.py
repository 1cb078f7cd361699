"""How figures are written in every report: one place, so the terminal, Markdown, CSV and HTML agree."""

from __future__ import annotations

from tracea_cli.bench.results import BenchResults, Environment, ResultRow
from tracea_cli.stats import Interval


def rate_unit(results: BenchResults) -> tuple[str, float]:
    """TFLOP/s on a GPU, GFLOP/s on the CPU: (label, divisor from FLOP/s)."""
    return ("TFLOP/s", 1e12) if results.environment.backend != "cpu" else ("GFLOP/s", 1e9)


def bandwidth_unit(results: BenchResults) -> tuple[str, float]:
    return ("TB/s", 1e12) if results.environment.backend != "cpu" else ("GB/s", 1e9)


def ms(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.3f}"
    return f"{x:.4f}"


def iqr(row: ResultRow) -> str:
    if row.q1_ms is None or row.q3_ms is None:
        return "-"
    return f"{ms(row.q1_ms)}–{ms(row.q3_ms)}"


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}%"


def cv(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def scaled(x: float | None, divisor: float) -> str:
    if x is None:
        return "-"
    v = x / divisor
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


def speedup(i: Interval | None) -> str:
    """'1.23× [1.18–1.27]' (the 95% interval)."""
    if i is None:
        return "-"
    return f"{i.estimate:.2f}× [{i.low:.2f}–{i.high:.2f}]"


def ratio_change(i: Interval) -> str:
    """A new/old time ratio as a signed percentage change with its interval: '+7.1% [+5.0, +9.3]'."""
    def signed(v: float) -> str:
        return f"{100 * (v - 1):+.1f}"

    return f"{signed(i.estimate)}% [{signed(i.low)}, {signed(i.high)}]"


def notes(row: ResultRow) -> str:
    parts = []
    if not row.ok:
        parts.append(row.status)
        if row.reason:
            parts.append(row.reason)
    if row.throttled:
        parts.append(f"throttled {row.throttled_samples}/{row.n} samples")
    if above_ceiling(row):
        parts.append("above the ceiling¹")
    return "; ".join(parts)


ABOVE_CEILING_NOTE = ("¹ Above 100% of the measured ceiling: the capability profile's figure is too low, measured on a busy "
                      "machine most likely; re-run `tracea doctor` when the machine is quiet.")


NO_CEILINGS_NOTE = ("No ceilings: the capability profile has no measurements for this device yet. Run `tracea doctor` "
                    "(without --quick) to measure them; later reports then show % of ceiling.")


def no_ceilings(results) -> bool:
    """True where no problem has a measured ceiling (a quick profile, or none): why "% ceiling" stays empty."""
    return not any(p.ceiling.flops_per_s or p.ceiling.bytes_per_s for p in results.problems)


def above_ceiling(row: ResultRow) -> bool:
    """A rate over 100% of the ceiling says the ceiling was measured badly (a busy machine), not that physics gave way."""
    return row.pct_of_ceiling is not None and row.pct_of_ceiling > 100.0


def load_text(env: Environment) -> str:
    if env.load is None:
        return "-"
    load = env.load
    others = "" if load.others_threads is None else (
        f"; other processes kept {load.others_threads:.1f} of them busy, CPU steal {100 * (load.steal_fraction or 0):.0f}%")
    return (f"1-minute load average {load.start:.1f} at the start, {load.end:.1f} at the end, on {load.cpu_threads} CPU "
            f"threads{others}")


def busy_warning(env: Environment) -> str | None:
    """A sentence for reports when other processes competed for the CPU during the run."""
    if not env.busy:
        return None
    return (f"The machine was busy while this ran ({load_text(env)}): other processes competed for the CPU, so the times "
            "are less reliable and comparisons with other runs may mislead.")
